"""Training with the paper's recipe (section 5), on one CPU, one GPU or many processes through Accelerate.

* `config`: every setting of a run (`TrainingConfig`), in parts by concern: data, model, optimization, checkpoints,
  decoding, logging;
* `presets`: the complete jobs (`TRAINING_PRESETS`);
* `options`: the command line of ``vanilla-transformer train``, its options grouped by those parts;
* `setup`: the run's corpus (`RunCorpus`), its model configuration and its tokenizer, each built once;
* `schedule`: the learning rate of equation (3);
* `step`: the pieces of an optimizer step: the loss over micro-batches and processes, compiling;
* `trainer`: the `Trainer`, which owns a run's state: its steps, validation, checkpoints and final model;
* `run`: `train`, the run itself: its directory, Accelerator and data, then the `Trainer`;
* `evaluation`: the `Evaluator`: validation loss, BLEU/chrF/exact match, selection on validation, the test set;
* `checkpoints`: atomic, checked checkpoints, resuming from them, and their averaging (section 6.1);
* `state`: the pickle-free format of a checkpoint's training state and random number generator states;
* `run_dir`: the run directory's layout (`RunLayout`), which folders hold a run, and what ``--resume`` and
  ``--overwrite`` may do with them;
* `preflight`: checks of the training data before training;
* `results`: the exported model and its training summary;
* `tracking`: ``metrics.jsonl`` and its curves;
* `finetune`: fine-tuning a trained model with `Seq2SeqTrainer`.
"""

from __future__ import annotations

from ..lazy_exports import lazy_exports

_EXPORTS: dict[str, tuple[str, str]] = {
    "average_checkpoints": ("checkpoints", "average_checkpoints"),
    "list_checkpoints": ("checkpoints", "list_checkpoints"),
    "load_checkpoint_weights": ("checkpoints", "load_checkpoint_weights"),
    "TrainingConfig": ("config", "TrainingConfig"),
    "Evaluator": ("evaluation", "Evaluator"),
    "score_translations": ("evaluation", "score_translations"),
    "build_parser": ("options", "build_parser"),
    "parse_args": ("options", "parse_args"),
    "DEFAULT_PRESET": ("presets", "DEFAULT_PRESET"),
    "TRAINING_PRESETS": ("presets", "TRAINING_PRESETS"),
    "average_run": ("results", "average_run"),
    "train": ("run", "train"),
    "RunLayout": ("run_dir", "RunLayout"),
    "noam_learning_rate": ("schedule", "noam_learning_rate"),
    "noam_schedule": ("schedule", "noam_schedule"),
    "RunCorpus": ("setup", "RunCorpus"),
    "build_model_config": ("setup", "build_model_config"),
    "load_splits": ("setup", "load_splits"),
    "accumulate_gradients": ("step", "accumulate_gradients"),
    "Trainer": ("trainer", "Trainer"),
    "TrainingProgress": ("progress", "TrainingProgress"),
    "out_of_time": ("progress", "out_of_time"),
}
"""Each name of the package: its module and its name there, imported when first used, so that ``vanilla-transformer
train --help`` builds its parser (`options`) without torch, transformers or accelerate."""


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = [
    "DEFAULT_PRESET",
    "TRAINING_PRESETS",
    "Evaluator",
    "RunCorpus",
    "RunLayout",
    "Trainer",
    "TrainingConfig",
    "TrainingProgress",
    "accumulate_gradients",
    "average_checkpoints",
    "average_run",
    "build_model_config",
    "build_parser",
    "list_checkpoints",
    "load_checkpoint_weights",
    "load_splits",
    "noam_learning_rate",
    "noam_schedule",
    "out_of_time",
    "parse_args",
    "score_translations",
    "train",
]

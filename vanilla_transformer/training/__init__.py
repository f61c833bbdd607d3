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

from .checkpoints import average_checkpoints, list_checkpoints, load_checkpoint_weights
from .config import TrainingConfig
from .evaluation import Evaluator, score_translations
from .options import build_parser, parse_args
from .presets import DEFAULT_PRESET, TRAINING_PRESETS
from .results import average_run
from .run import train
from .run_dir import RunLayout
from .schedule import noam_learning_rate, noam_schedule
from .setup import RunCorpus, build_model_config, load_splits
from .step import accumulate_gradients
from .trainer import Trainer, TrainingProgress, out_of_time

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

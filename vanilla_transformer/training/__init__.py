"""Training with the paper's recipe (section 5), on one CPU, one GPU or many processes through Accelerate.

* `options`: every setting of a run (`TrainingConfig`), the presets and the command line;
* `setup`: the run's corpus (`RunCorpus`), its model configuration and its tokenizer, each built once;
* `schedule`: the learning rate of equation (3);
* `step`: one optimizer step's loss over micro-batches and processes;
* `loop`: `train`, the run itself, with checkpoints and resume;
* `evaluation`: the `Evaluator`: validation loss, BLEU/chrF/exact match, selection on validation, the test set;
* `checkpoints`: atomic, checked checkpoints, resuming from them, and their averaging (section 6.1);
* `state`: the pickle-free format of a checkpoint's training state and random number generator states;
* `run_dir`: which folders hold a run, and what ``--resume`` and ``--overwrite`` may do with them;
* `preflight`: checks of the training data before training;
* `results`: the exported model and its training summary;
* `tracking`: ``metrics.jsonl`` and its curves;
* `finetune`: fine-tuning a trained model with `Seq2SeqTrainer`.
"""

from .checkpoints import average_checkpoints, list_checkpoints, load_checkpoint_weights
from .evaluation import Evaluator, score_translations
from .loop import TrainingProgress, gradient_accumulation_steps, out_of_time, train
from .options import DEFAULT_PRESET, TRAINING_PRESETS, TrainingConfig, build_parser, parse_args
from .results import average_run
from .schedule import noam_learning_rate, noam_schedule
from .setup import RunCorpus, build_model_config, load_splits
from .step import accumulate_gradients

__all__ = [
    "DEFAULT_PRESET",
    "TRAINING_PRESETS",
    "Evaluator",
    "RunCorpus",
    "TrainingConfig",
    "TrainingProgress",
    "accumulate_gradients",
    "average_checkpoints",
    "average_run",
    "build_model_config",
    "build_parser",
    "gradient_accumulation_steps",
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

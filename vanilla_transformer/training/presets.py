"""The training presets: complete jobs, each a set of `TrainingConfig` options (their command-line names), which the
command line's options then override."""

from __future__ import annotations

from typing import Any

_WMT14: dict[str, Any] = dict(
    dataset="hf:wmt14",
    dataset_config="de-en",
    valid_split="validation",
    test_split="test",
    vocab_size=37_000,
    compound_split_bleu=True,
)
"""The paper's corpus, WMT14 English-German (Hugging Face `wmt14`, `de-en`), with newstest2013 for validation,
newstest2014 for test, and its 37,000-token shared vocabulary: the data of both of the paper's jobs. The test set is
scored with the paper's own BLEU too (tokenized and compound-split, `vanilla_transformer.metrics.compound_split`),
the figure Table 2 reports, beside sacreBLEU's."""

_WMT14_FILES: dict[str, Any] = dict(valid_split="newstest2013", test_split="newstest2014", dataset_config=None)
"""The same corpus as local files (``--dataset text --data-dir DIR``: ``DIR/train.{en,de}``,
``DIR/newstest2013.{en,de}``, ``DIR/newstest2014.{en,de}``): the test sets by their own names, as WMT distributes
them, and no Hub configuration."""

TRAINING_PRESETS: dict[str, dict[str, Any]] = {
    # English number words to German number words, generated on the fly (data.make_numbers_task): a 1.5M-parameter
    # model reaches about 97% exact match in about 6 minutes on two busy CPU cores. One thread: on a CPU shared with
    # other work, two OpenMP threads per process ran up to 16 times slower. Half the rate of equation (3) with a
    # warmup of 300 steps (peak 2.6e-3); the full rate (peak 4.4e-3 after 400 steps) made exact match fall from 90%
    # to about 55%.
    "numbers": dict(
        dataset="numbers",
        vocab_size=500,
        max_length=64,
        model="numbers",
        max_tokens=2048,
        tokens_per_step=None,
        max_steps=1000,
        warmup_steps=300,
        lr_scale=0.5,
        log_every=20,
        eval_every=250,
        save_every=50,
        keep_checkpoints=5,
        average_checkpoints=5,
        num_threads=1,
    ),
    # Multi30k English-German (29k captions), the raw files of $VANILLA_TRANSFORMER_DATA/multi30k (or --data-dir), in
    # 60 minutes of two CPU cores: 57 minutes of training (evaluations included), then the final selection and test
    # (under a minute). A small base model (N=3, d_model=256, h=4, d_ff=512; 6.0M parameters) at 4,096 tokens per
    # step, in bf16 autocast with eager attention where the CPU has native bf16 (--mixed-precision auto; fp32
    # elsewhere, as emulated bf16 ran 60x slower): an AVX-512 BF16 CPU trains it 1.33 times faster than fp32 with
    # SDPA, whose CPU kernel with a padding mask gains nothing from bf16 (scripts/benchmark_precision.py); and
    # compiled there (--dynamo-backend auto): 9,586 steps in the hour against 6,428 eager (issue 36);
    # about 28 epochs. P_drop 0.2: at 0.1 validation loss stopped falling after ~20 epochs, and 0.2 gave 38.99
    # validation BLEU against 37.58 (docs/results/multi30k). Equation (3) scaled by 0.45 after 500 warmup steps
    # (peak 1.25e-3). Checkpoints every 250 steps (about an epoch); the last 5 are averaged, and the average is kept
    # unless the last checkpoint is better on validation BLEU by more than 0.5. Beam 4 with GNMT alpha 1.0, not the
    # paper's 0.6: as in section 6.1, alpha is chosen on the development set. At 0.6 the translations were 4 to 7%
    # shorter than the references; 1.0 gained 0.19 validation BLEU on the mean of three trained models, and is the
    # largest alpha with no run-on translation: at 1.2 one German -> English translation repeated a word to 34 words
    # (docs/results/multi30k/length-penalty-sweep.json).
    "multi30k": dict(
        dataset="text",
        valid_split="valid",
        test_split="test_2016_flickr",
        vocab_size=8000,
        max_length=128,
        model="multi30k",
        max_tokens=4096,
        tokens_per_step=None,
        max_steps=20_000,
        max_train_minutes=57.0,
        mixed_precision="auto",
        dynamo_backend="auto",
        attn_implementation="auto",
        warmup_steps=500,
        lr_scale=0.45,
        log_every=50,
        eval_every=1000,
        save_every=250,
        keep_checkpoints=5,
        average_checkpoints=5,
        select_on_valid=True,
        length_penalty=1.0,
        num_threads=2,
    ),
    # The paper's base and big models on WMT14 English-German (`_WMT14`). Checkpoints every ~10 minutes of the
    # paper's 8 P100 GPUs.
    "wmt14-base": dict(
        **_WMT14,
        model="base",
        max_tokens=12_500,
        tokens_per_step=50_000,
        fill_gpu_memory=True,  # on CUDA, as few micro-batches as the GPU holds: one H200 takes the whole step
        mixed_precision="auto",  # bf16 where the GPU computes it (issue 55: train's default is its fastest path)
        max_steps=100_000,
        warmup_steps=4000,
        save_every=1400,
        keep_checkpoints=5,
        average_checkpoints=5,
    ),
    "wmt14-big": dict(
        **_WMT14,
        model="big",
        max_tokens=6250,
        tokens_per_step=50_000,
        fill_gpu_memory=True,
        mixed_precision="auto",
        max_steps=300_000,
        warmup_steps=4000,
        save_every=600,
        keep_checkpoints=20,
        average_checkpoints=20,
    ),
}
DEFAULT_PRESET = "numbers"

FILE_DATASETS = ("text", "tsv", "jsonl")
"""The ``--dataset`` kinds read from files in ``--data-dir``."""

PRESET_FILE_SETTINGS: dict[str, dict[str, Any]] = {"wmt14-base": _WMT14_FILES, "wmt14-big": _WMT14_FILES}
"""What a preset of a Hugging Face corpus sets instead when the corpus is given as files (a `FILE_DATASETS` kind):
its split names there. Options given on the command line override these too."""

PRESET_DATA_FOLDERS = {"multi30k": "multi30k"}
"""The presets that read a named corpus, and its folder in ``$VANILLA_TRANSFORMER_DATA`` (`DATA_DIR_VARIABLE`)."""


__all__ = ["DEFAULT_PRESET", "FILE_DATASETS", "PRESET_DATA_FOLDERS", "PRESET_FILE_SETTINGS", "TRAINING_PRESETS"]

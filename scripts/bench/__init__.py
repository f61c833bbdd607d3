"""The benchmarks' only shared code (``scripts/bench``): one timer, one results record, the workloads, the figures'
helpers, the MarianMT twin, the training contestants and the serving code the benchmarks call.

Every benchmark script (one module each) parses its options, declares its contestants, calls these, writes its
results file with `Record` and names the figures it publishes in ``FIGURES`` (``scripts/render_figures.py`` collects
them). Each module's docstring says more:

* `timing`: `interleave` runs contestants in turn on the same items, reversing their order every round, so that a
  drift of the machine's load hits all alike; `matmul_rate` times the device's dense matmul with it (MFU's
  denominator);
* `record`: `Record` writes a results file's figures with the command, the wall time, the load, the processor, the
  GPUs and the package versions; `environment_of` reads those back from any committed results file;
* `workloads`: the model sizes, the decoding benchmark's sentences, the one FLOPs formula and the one training step;
* `figures`: reading a results folder and writing Markdown tables, for the benchmarks' figure functions;
* `options`: the parser with ``--threads`` and ``--output``, Multi30k's test files, the checks of counts and files;
* `twin`: `marian_twin`, MarianMT of the same weights;
* `contestants` and `processes`: the training contestants several benchmarks share (ours from ``train``'s options,
  MarianMT in `Seq2SeqTrainer`, plain PyTorch in `plain_torch`), each in a worker process of its own;
* `serving`: the package's search, onnxruntime and CTranslate2 decoding, imported in one place;
* `profiling`: `StepProfile`, torch's profiler over a worker's steps, summarised.
"""

from .profiling import StepProfile, profile_lines
from .record import Record, environment_of, write_json
from .timing import Timings, interleave, matmul_rate, synchronize
from .twin import marian_twin
from .workloads import (
    SIZES,
    adam,
    collate,
    forward_flops,
    model_config,
    source_sentences,
    synthetic_pairs,
    train_step,
    training_flops,
)

__all__ = ["SIZES", "Record", "StepProfile", "Timings", "adam", "collate", "environment_of", "forward_flops",
    "interleave", "marian_twin", "matmul_rate", "model_config", "profile_lines", "source_sentences",
    "synchronize", "synthetic_pairs", "train_step", "training_flops", "write_json"]  # fmt: skip

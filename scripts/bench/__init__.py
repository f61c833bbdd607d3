"""The benchmarks' only shared code (``scripts/bench``): one timer, one results record, the workloads, the figures'
helpers, the MarianMT twin and the serving code the benchmarks call.

Every benchmark script (one module each) parses its options, declares its contestants, calls these, writes its
results file with `Record` and names the figures it publishes in ``FIGURES`` (``scripts/render_figures.py`` collects
them):

* `interleave` runs contestants in turn on the same items, reversing their order every round, with warm-up and
  device synchronisation as settings, so that a drift of the machine's load hits all alike; `matmul_rate` times
  the device's dense matmul with it (the denominator of MFU);
* `Record` notes the load and the clock when a benchmark starts, and `Record.write` adds the command, the wall time,
  the load, the processor, the GPUs and the package versions (`vanilla_transformer.environment`) to its figures;
* `environment_of` reads those back from any committed results file, whatever schema it was written in;
* `workloads`: the model sizes (`model_config`), the corpora and their batches, the one FLOPs formula
  (`forward_flops`, `training_flops`) and the one training step (`train_step`, with the package's Adam);
* `figures`: reading a results folder and writing Markdown tables, for the benchmarks' figure functions;
* `options`: the parser with ``--threads`` and ``--output``, Multi30k's test files, the checks of counts and files;
* `marian_twin` is MarianMT of the same weights (`vanilla_transformer.export.marian.vanilla_to_marian`);
* `contestants`: the training contestants several benchmarks share, written once: ours (``train``'s options, and
  ``ours:default``, its default as-is), MarianMT in `Seq2SeqTrainer`, and plain PyTorch (`plain_torch`);
* `processes`: contestants in worker processes of their own, the coordinator's side of them, and our `Trainer`
  built from ``train`` options;
* `serving`: the package's search, onnxruntime and CTranslate2 decoding, imported in one place; a model's
  CTranslate2 exports loaded (`ct2_translators`); the tokens of each translation (`hypotheses`);
* `StepProfile`: torch's profiler over a worker's steps, summarised (device busy share, runtime calls, top ops).
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

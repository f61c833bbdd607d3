"""The benchmarking kit of ``scripts/``: one interleaved timer, one results record, one MarianMT twin.

Every benchmark script parses its options, declares its contestants and calls these:

* `interleave` runs contestants in turn on the same items, reversing their order every round, with warm-up and
  device synchronisation as settings, so that a drift of the machine's load hits all alike;
* `Record` notes the load and the clock when a benchmark starts, and `Record.write` adds the command, the wall time,
  the load, the processor, the GPUs and the package versions (`vanilla_transformer.environment`) to its figures;
* `environment_of` reads those back from any committed results file, whatever schema it was written in;
* `marian_twin` is MarianMT of the same weights (`vanilla_transformer.export.marian.vanilla_to_marian`);
* `matmul` (a contestant), `matmul_rate` and `peak_memory` measure the device: its dense matmul rate (for MFU)
  and a call's peak memory.
"""

from .device import matmul, matmul_rate, peak_memory, synchronize
from .record import Record, environment_of, write_json
from .timing import Timings, interleave
from .twin import marian_twin

__all__ = [
    "Record",
    "Timings",
    "environment_of",
    "interleave",
    "marian_twin",
    "matmul",
    "matmul_rate",
    "peak_memory",
    "synchronize",
    "write_json",
]

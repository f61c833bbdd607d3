"""``vanilla-transformer`` with probes, for tests that run it under ``accelerate launch``.

* ``PROBE_DTYPES=<file>``: every process writes ``<file>.<rank>``, a JSON list of the dtypes of the outputs of the
  model's linear layers seen in training forward passes: the precision the run computed in, observed where it
  happens (inside the model, under whatever autocast the run set up).
* ``PROBE_KILL_AT=<name>``: every process dies (``os._exit``, no cleanup, as if killed) when it writes a file of
  the checkpoint whose name holds ``<name>`` (each process writes its random-number state there).
"""

import json
import os
import sys
from pathlib import Path

import torch

from vanilla_transformer.cli import main
from vanilla_transformer.training import checkpoints

dtypes: set[str] = set()


def record_dtype(module, inputs, output):
    if isinstance(module, torch.nn.Linear) and module.training:
        dtypes.add(str(output.dtype))


if __name__ == "__main__":
    torch.nn.modules.module.register_module_forward_hook(record_dtype)
    kill_at = os.environ.get("PROBE_KILL_AT")
    if kill_at:
        save_state = checkpoints.save_state

        def killed_while_saving(state, path):
            if kill_at in str(path):
                os._exit(1)
            return save_state(state, path)

        checkpoints.save_state = killed_while_saving
    code = main(sys.argv[1:])
    if os.environ.get("PROBE_DTYPES"):
        Path(f"{os.environ['PROBE_DTYPES']}.{os.environ.get('RANK', '0')}").write_text(json.dumps(sorted(dtypes)))
    sys.exit(code)

"""The compile cache: what torch.compile made for a run's model, kept with the data cache so that a rerun skips it.

torch keeps its own caches of compiled graphs (the inductor FX-graph cache and the AOTAutograd cache, by default
under the system's temporary folder, ``torch._inductor.config.fx_graph_cache`` and
``torch._functorch.config.enable_autograd_cache``). `torch.compiler.save_cache_artifacts` gathers what this process
put in them, and `torch.compiler.load_cache_artifacts` puts it back: the "mega-cache". After each step that
compiled (its first, and any that recompiled) a compiled run's main process saves these artifacts as ``compile-<key>.bin`` in ``--data-cache-dir`` (default
``$VANILLA_TRANSFORMER_CACHE``, else ``~/.cache/vanilla-transformer``), written whole (`atomic.write_file`); a later
run with the same key loads them before its first step, so that its compiler finds its inductor graphs compiled
(and AOTAutograd's, where that cache keeps them) and only traces the model.

The key is a hash of what decides the graphs: torch's version, the device type, the model's configuration, the
precision, the compile settings (backend, mode, full graph, dynamic shapes, regional compilation), the attention
implementation and the label smoothing. The artifacts are pickled code (compiled kernels and graphs) that loading
runs: they come only from the cache folder the user chose for this run's data, written by the user's own runs, and
are never fetched from elsewhere. Deleting the file is always safe: the next run compiles and writes it again.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.logging import get_logger

from ..atomic import write_file
from ..configuration_vanilla_transformer import VanillaTransformerConfig
from ..data.cache import cache_key, default_cache_dir
from .config import TrainingConfig

logger = get_logger(__name__)

COMPILE_CACHE_PREFIX = "compile-"


def compile_cache_path(
    config: TrainingConfig, accelerator: Accelerator, model_config: VanillaTransformerConfig
) -> Path:
    """Where the run's compile cache lives: ``compile-<key>.bin`` in the data cache folder (see the module)."""
    cache_root = Path(config.data.data_cache_dir) if config.data.data_cache_dir else default_cache_dir()
    plugin = accelerator.state.dynamo_plugin
    key = cache_key(
        torch=torch.__version__,
        device=accelerator.device.type,
        model=json.loads(model_config.to_json_string(use_diff=False)),
        precision=accelerator.mixed_precision,
        compile=plugin.to_dict(),
        attention=config.model.attn_implementation,
        label_smoothing=config.optimization.label_smoothing,
    )
    return cache_root / f"{COMPILE_CACHE_PREFIX}{key}.bin"


def load_compile_cache(path: Path) -> bool:
    """Put the artifacts saved at `path` into torch's caches; whether there were any. A file torch cannot read (of
    another version, cut) is reported and left for the next save to replace."""
    if not path.is_file():
        return False
    try:
        info = torch.compiler.load_cache_artifacts(path.read_bytes())
    except Exception as error:  # torch raises what its unpickling raises
        logger.warning(
            f"the compile cache {path} could not be loaded ({error}); compiling anew", main_process_only=True
        )
        return False
    return info is not None


def save_compile_cache(path: Path) -> bool:
    """Write what this process compiled so far to `path`, whole; whether there was anything to write."""
    saved = torch.compiler.save_cache_artifacts()
    if saved is None or not saved[0]:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, saved[0], what="the compile cache")
    return True


__all__ = ["COMPILE_CACHE_PREFIX", "compile_cache_path", "load_compile_cache", "save_compile_cache"]

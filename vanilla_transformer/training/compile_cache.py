"""The compile cache: what torch.compile made for a run's model, kept with the data cache so that a rerun skips it.

torch keeps its own caches of compiled graphs (the inductor FX-graph cache and the AOTAutograd cache, by default
under the system's temporary folder, ``torch._inductor.config.fx_graph_cache`` and
``torch._functorch.config.enable_autograd_cache``). `torch.compiler.save_cache_artifacts` gathers what this process
put in them, and `torch.compiler.load_cache_artifacts` puts it back: the "mega-cache" (`load_compile_cache` takes
its two steps apart, to check the artifacts between them). After each step that
compiled (its first, and any that recompiled) a compiled run's main process saves these artifacts as ``compile-<key>.bin`` in ``--data-cache-dir`` (default
``$VANILLA_TRANSFORMER_CACHE``, else ``~/.cache/vanilla-transformer``), written whole (`atomic.write_file`); a later
run with the same key loads them before its first step, so that its compiler finds its inductor graphs compiled
(and AOTAutograd's, where that cache keeps them) and only traces the model.

The key is a hash of what decides the graphs: torch's version, the device type, the model's configuration, the
precision, the compile settings (backend, mode, full graph, dynamic shapes, regional compilation), the attention
implementation and the label smoothing. Deleting the file is always safe: the next run compiles and writes it again.

The artifacts are compiled code, and torch unpickles them when it uses them: a file is loaded only if this program
wrote it for this user. `save_compile_cache` records the SHA-256 and size of each file it writes in
``compile-written.json``, kept in the user's own cache folder (`data.cache.default_cache_dir`), not in the folder a
run's settings name (a run folder from elsewhere may name a folder holding a planted file, and a manifest beside it).
`load_compile_cache` loads a file only if (`trusted_artifacts`): the record names it (looked up before a byte of the
file is read); its folder and the file belong to this user (``os.getuid``) and neither is writable by others, nor by
a group other than the user's own private group; the file is no link (opened with ``O_NOFOLLOW``) and is a regular
file of the size the record gives (checked on disk before it is read, through the package's reader of files it did
not write, `vanilla_transformer.reading`: a 20 GB file is refused, not read); its bytes hash to what the record says
was written there (a file cut short or replaced does not); and every artifact's key, a path that torch writes under
its own cache folders, is relative and without ``..``. Anything else is one warning naming the file and why, and the
run compiles anew (the next save replaces the file). The cache files and the record are written with mode 0600.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path, PurePosixPath

import torch
from accelerate import Accelerator

from ..atomic import write_file
from ..configuration_vanilla_transformer import VanillaTransformerConfig
from ..data.cache import cache_key, default_cache_dir
from ..environment import available_memory
from ..reading import FileRefused, open_checked
from .config import TrainingConfig
from .logs import get_logger

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


RECORD_FILE = "compile-written.json"
"""The record of the compile caches this program wrote for this user (path: SHA-256 and size), in
`default_cache_dir`."""


def _record_path() -> Path:
    return default_cache_dir() / RECORD_FILE


def _owned(status: os.stat_result, what: str) -> str | None:
    """Why a file or folder of this `status` may not be trusted, or None: it must be this user's, and writable by no
    one else (writable by its group only where the group is the user's own private group, as a umask of 002 gives)."""
    if status.st_uid != os.getuid():
        return f"{what} belongs to user id {status.st_uid}, not to this user ({os.getuid()})"
    shared = status.st_mode & stat.S_IWOTH or (status.st_mode & stat.S_IWGRP and not _private_group(status.st_gid))
    if shared:
        return f"{what} can be written by others (mode {stat.S_IMODE(status.st_mode):o})"
    return None


def _private_group(gid: int) -> bool:
    """Whether group `gid` is this user's private group: the user's primary group, of the user's name, with no
    other member."""
    try:
        import grp
        import pwd

        user, group = pwd.getpwuid(os.getuid()), grp.getgrgid(gid)
    except (ImportError, KeyError):
        return False
    return gid == user.pw_gid and group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}


def _read_owned(path: Path, size: int | None) -> bytes | str:
    """The bytes of `path`, or why they may not be trusted: its folder or itself not this user's, or writable by the
    group or others; the file a link (never followed) or not a regular file; its size on disk not the `size` this
    program wrote (None: unknown), or larger than memory allows. Nothing is read before all of that is known, through
    the reader of files this program did not write (`reading.open_checked`)."""
    try:
        problem = _owned(os.stat(path.parent), f"its folder {path.parent}")
        if problem:
            return problem
        limit = max(available_memory() // 2, 1 << 20)  # without a recorded size: what memory holds
        stream = open_checked(path, "compile cache", limit=limit, links=False)
    except FileNotFoundError:
        return "it does not exist"
    except FileRefused as error:
        return error.reason
    except OSError as error:
        return f"it cannot be read ({error.strerror})"
    with stream:
        status = os.fstat(stream.fileno())
        problem = _owned(status, "it")
        if problem is None and size is not None and status.st_size != size:
            problem = (
                f"it is not what this program wrote there (its size on disk is {status.st_size:,} bytes, the record's "
                f"{size:,}): it is not read"
            )
        return problem or stream.read()


def _read_record() -> dict[str, dict[str, object]]:
    """The record of what `save_compile_cache` wrote (path: its SHA-256 and size, or the SHA-256 alone as older
    versions recorded it); empty when there is none, or one that is not this user's."""
    data = _read_owned(_record_path(), None)
    if isinstance(data, str):
        return {}
    try:
        record = json.loads(data)
    except ValueError:
        return {}
    if not isinstance(record, dict):
        return {}
    entries = {}
    for name, value in record.items():
        entry = {"sha256": value} if isinstance(value, str) else value
        size = entry.get("size") if isinstance(entry, dict) else None
        if isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and (size is None or _is_size(size)):
            entries[name] = {"sha256": entry["sha256"], "size": size}
    return entries


def _is_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def record_compile_cache(path: Path, data: bytes) -> None:
    """Record that this program wrote `data` at `path` (`RECORD_FILE`): its SHA-256 and size; the entries of files
    now gone are dropped."""
    record = {name: entry for name, entry in _read_record().items() if Path(name).is_file()}
    record[str(path.resolve())] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    target = _record_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    write_file(target, json.dumps(record, indent=1, sort_keys=True) + "\n", what="the compile cache's record")
    os.chmod(target, 0o600)


def _unsafe_key(key: object) -> bool:
    """Whether an artifact's key would make torch write outside its cache folder: not a plain relative path."""
    if not isinstance(key, str) or not key or "\0" in key or "\\" in key:
        return True
    path = PurePosixPath(key)
    return path.is_absolute() or ".." in path.parts or key.startswith("~")


def trusted_artifacts(path: Path) -> tuple[object | None, str | None]:
    """The artifacts saved at `path`, deserialized but not yet put in torch's caches, if they may be loaded (see the
    module); else None and why not (None when there is no file)."""
    if not path.is_file() and not path.is_symlink():
        return None, None
    recorded = _read_record().get(str(path.resolve()))  # before a byte of the file is read
    if recorded is None:
        return None, "this program has no record of writing it for this user"
    data = _read_owned(path, recorded["size"])
    if isinstance(data, str):
        return None, data
    if hashlib.sha256(data).hexdigest() != recorded["sha256"]:
        return None, "it is not what this program wrote there (cut short or changed since)"
    manager = _artifact_manager()
    if manager is None:
        return None, f"torch {torch.__version__} keeps its compile cache in a form this program does not know"
    artifacts = manager.deserialize(data)
    if artifacts is None:
        return None, "torch cannot read it"
    for kind, entries in artifacts.items():
        for artifact in entries:
            if _unsafe_key(getattr(artifact, "key", None)):
                return (
                    None,
                    f"its {kind} artifact {getattr(artifact, 'key', None)!r} names a path outside torch's cache",
                )
    return (manager, artifacts), None


def _artifact_manager():
    """torch's reader of the artifacts' format (private; read its way, so that keys are checked before anything is
    written): None where this torch does not have it as known, and then nothing is loaded."""
    try:
        from torch.compiler._cache import CacheArtifactManager
    except ImportError:
        return None
    if not all(callable(getattr(CacheArtifactManager, name, None)) for name in ("deserialize", "populate_caches")):
        return None
    return CacheArtifactManager


def load_compile_cache(path: Path) -> bool:
    """Put the artifacts saved at `path` into torch's caches, if they may be (`trusted_artifacts`); whether any were
    loaded. A file that may not is named in one warning with why, and left for the next save to replace."""
    loaded, problem = trusted_artifacts(path)
    if problem is not None:
        logger.warning(f"the compile cache {path} is not loaded: {problem}; compiling anew", main_process_only=True)
    if loaded is None:
        return False
    manager, artifacts = loaded
    manager.populate_caches(artifacts)
    return True


def save_compile_cache(path: Path) -> bool:
    """Write what this process compiled so far to `path`, whole, with mode 0600, and record it
    (`record_compile_cache`); whether there was anything to write."""
    save = getattr(torch.compiler, "save_cache_artifacts", None)
    if not callable(save) or _artifact_manager() is None:  # a torch that keeps no cache the loader can check
        logger.warning(
            f"torch {torch.__version__} keeps its compile cache in a form this program does not know: "
            f"{path} is not written, and the next run compiles anew",
            main_process_only=True,
        )
        return False
    saved = save()
    if saved is None or not saved[0]:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, saved[0], what="the compile cache")
    os.chmod(path, 0o600)
    record_compile_cache(path, saved[0])
    return True


__all__ = [
    "COMPILE_CACHE_PREFIX",
    "RECORD_FILE",
    "compile_cache_path",
    "load_compile_cache",
    "record_compile_cache",
    "save_compile_cache",
    "trusted_artifacts",
]

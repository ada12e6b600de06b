"""Portable checkpoints: written atomically by one rank, loaded safely on any kind.

A checkpoint is a plain dict of tensors and plain values. It is written to a temporary
file beside the target, flushed, fsync'ed and renamed over the target, so a crash at any
moment leaves the previous checkpoint intact. Loading maps to the CPU first (a file
written on an NPU loads on a GPU or CPU) and uses `weights_only=True`, so a file that
would run code when unpickled is refused.
"""

import contextlib
import hashlib
import os
import pickle
import shutil
import signal
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, BinaryIO, TypeVar

import torch

from devicekit import runtime
from devicekit.accelerator import device as runtime_device
from devicekit.ddp import unwrap
from devicekit.errors import UsageError
from devicekit.sharding import holds_sharded, is_sharded, optimizer_owner

PREFIX = "module."

_V = TypeVar("_V")


def strip_prefix(state_dict: Mapping[Any, _V], prefix: str = PREFIX) -> dict[Any, _V]:
    """The state_dict without DDP's `module.` prefix on every key (if all keys carry it)."""
    if state_dict and all(isinstance(key, str) and key.startswith(prefix) for key in state_dict):
        return {key[len(prefix) :]: value for key, value in state_dict.items()}
    return dict(state_dict)


def portable(obj: Any) -> Any:
    """`obj` as a checkpoint holds it: modules unwrapped (DDP, DataParallel,
    torch.compile) and replaced by their state_dict, other objects with a state_dict()
    (optimizers, schedulers, GradScalers) by theirs, and `module.` prefixes stripped
    from every dict whose keys all carry one; dicts, lists and tuples are walked."""
    if isinstance(obj, torch.nn.Module):
        return strip_prefix(unwrap(obj).state_dict())
    if not isinstance(obj, (dict, list, tuple)) and callable(getattr(obj, "state_dict", None)):
        return portable(obj.state_dict())
    if isinstance(obj, dict):
        return {key: portable(value) for key, value in strip_prefix(obj).items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(portable(value) for value in obj)
    return obj


def save_checkpoint(path: str | os.PathLike[str], obj: Any) -> None:
    """Write `obj` to `path` from rank 0 (other ranks return at once), atomically: the
    file is always the old or the new checkpoint, never half of one.

    Modules in `obj` are unwrapped and saved as their state_dict without `module.`
    prefixes, every tensor on the CPU, so the file loads into a plain model on any
    device; optimizers, schedulers and scalers are saved as their state_dict. Safe to call
    on every rank or only on rank 0; to read it back on other ranks, call
    devicekit.barrier() first.

    With a model from `devicekit.shard()`, every rank must call it. The model alone is
    written as one file of its full weights, which plain torch.load + load_state_dict
    read without devicekit. A dict holding it is written as a folder, each rank its own
    shards; load that with `load_checkpoint(path, into=...)`, at any world size and on
    any device kind.
    """
    if isinstance(obj, torch.nn.Module) and is_sharded(obj):
        from devicekit.sharded_checkpoint import full_weights

        weights = full_weights(obj)  # every rank takes part in gathering the shards
        if runtime.context().rank == 0:
            save_atomic(weights, os.fspath(path))
    elif holds_sharded(obj):
        from devicekit.sharded_checkpoint import save_sharded

        save_sharded(os.fspath(path), obj)
    elif runtime.context().rank == 0:
        save_atomic(portable(obj), os.fspath(path))


def model_state_dict(model: torch.nn.Module) -> dict[str, Any]:
    """`model`'s state_dict as an unsharded run saves it: without DDP's `module.` prefix.
    For a model from `shard()` every rank must call it: the shards are gathered onto the
    CPU of rank 0, which gets the whole state_dict; the other ranks get an empty dict."""
    if is_sharded(model):
        from devicekit.sharded_checkpoint import full_weights

        return dict(full_weights(model))
    return strip_prefix(unwrap(model).state_dict())


def optimizer_state_dict(
    optimizer: torch.optim.Optimizer, model: torch.nn.Module
) -> dict[str, Any]:
    """The state_dict of `optimizer`, which updates `model`, as an unsharded run saves it
    (keyed by parameter position). For a model from `shard()` every rank must call it: rank
    0 gets the whole state on the CPU, the other ranks an empty dict."""
    if is_sharded(model):
        from devicekit.sharded_checkpoint import full_optimizer_state

        return full_optimizer_state(model, optimizer)
    return optimizer.state_dict()


def load_model_state_dict(model: torch.nn.Module, state: Mapping[str, Any]) -> None:
    """Load a state_dict an unsharded run saved (or `model_state_dict` gave), with or
    without `module.` prefixes, into `model`, sharded or not. A name or shape that differs is
    a UsageError naming the first one."""
    load_state_dict_into(unwrap(model), dict(state), "the state_dict")


def load_optimizer_state_dict(
    optimizer: torch.optim.Optimizer, model: torch.nn.Module, state: Mapping[str, Any]
) -> None:
    """Load an optimizer state_dict an unsharded run saved (or `optimizer_state_dict`
    gave) into `optimizer`, which updates `model`, sharded or not."""
    if is_sharded(model):
        from devicekit.sharded_checkpoint import load_full_optimizer_into_sharded

        load_full_optimizer_into_sharded(model, optimizer, state)
    else:
        optimizer.load_state_dict(dict(state))


def on_cpu(obj: Any, _copies: dict[int, torch.Tensor] | None = None) -> Any:
    """`obj` with every tensor copied to the CPU (a tensor met twice, such as tied weights,
    stays one tensor), so that plain torch.load opens the file on a machine without the
    device it was written on."""
    copies = {} if _copies is None else _copies
    if isinstance(obj, torch.Tensor):
        if id(obj) not in copies:
            copies[id(obj)] = obj.detach().cpu()
        return copies[id(obj)]
    if isinstance(obj, dict):
        return {key: on_cpu(value, copies) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(on_cpu(value, copies) for value in obj)
    return obj


def load_checkpoint(
    path: str | os.PathLike[str],
    map_location: str | torch.device | None = None,
    *,
    into: Mapping[str, Any] | None = None,
) -> Any:
    """Load a checkpoint with weights_only=True (a file that would run code is refused)
    onto `map_location` (default: this rank's device), with `module.` prefixes stripped.
    A missing, truncated or unsafe file raises UsageError saying which and why.

    With `into` (the dict that was saved, e.g. {"model": model, "optimizer": opt}), the
    checkpoint's entries are loaded in place into the modules, optimizers, schedulers and
    scalers there, and the other, plain values are returned: one resume code for a sharded
    checkpoint folder (every rank calls it) and a file.
    """
    path = os.fspath(path)
    if into is None:
        if os.path.isdir(path) and os.path.isfile(os.path.join(path, ".metadata")):
            raise UsageError(
                f"checkpoint {path!r} is a sharded checkpoint folder: load it into your "
                "objects with load_checkpoint(path, into={'model': model, ...})"
            )
        location = runtime_device() if map_location is None else map_location
        return portable(load(path, "checkpoint", map_location=location))
    if os.path.isdir(path) or not os.path.exists(path):
        from devicekit.sharded_checkpoint import load_sharded

        values = load_sharded(path, into)
    else:
        values = _load_file_into(path, into)
    for key, target in into.items():  # schedulers, GradScalers: saved as their state_dict
        restorable = callable(getattr(target, "load_state_dict", None))
        if restorable and not isinstance(target, (torch.nn.Module, torch.optim.Optimizer)):
            if key not in values:
                raise UsageError(
                    f"checkpoint {path!r} has no {key!r} entry: it was saved without it"
                )
            target.load_state_dict(values.pop(key))
    return values


def _load_file_into(path: str, into: Mapping[str, Any]) -> dict[str, Any]:
    """A single-file checkpoint loaded into the modules and optimizers of `into`."""
    saved = load(path, "checkpoint", map_location="cpu")
    if not isinstance(saved, dict):
        raise UsageError(
            f"checkpoint {path!r} holds a {type(saved).__name__}, not a dict of entries: "
            "load it without into="
        )
    values = dict(saved)
    modules = {key: target for key, target in into.items() if isinstance(target, torch.nn.Module)}
    for key, target in into.items():
        if not isinstance(target, (torch.nn.Module, torch.optim.Optimizer)):
            continue
        if key not in saved:
            raise UsageError(f"checkpoint {path!r} has no {key!r} entry: it was saved without it")
        state = values.pop(key)
        if isinstance(target, torch.nn.Module):
            load_state_dict_into(unwrap(target), state, f"checkpoint {path!r}")
            continue
        owner = optimizer_owner(target, modules.values())
        if owner is not None:
            load_optimizer_state_dict(target, owner, state)
        else:
            target.load_state_dict(state)
    return values


def fsync_dir(path: str) -> None:
    """Make a rename in the folder `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_atomic(obj: Any, path: str) -> None:
    """torch.save `obj`, its tensors on the CPU, to `path` so that `path` is always either
    the old or the new file."""
    obj = on_cpu(obj)
    _write_atomic(path, lambda handle: torch.save(obj, handle))


def copy_atomic(source: str, path: str) -> None:
    """Copy the file `source` to `path` with the same guarantee as save_atomic."""
    with open(source, "rb") as src:
        _write_atomic(path, lambda handle: shutil.copyfileobj(src, handle))


def _write_atomic(path: str, write: Callable[[BinaryIO], object]) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with _stop_signals_raise():
        fd, tmp = tempfile.mkstemp(prefix=_temporary_prefix(path), suffix=".tmp", dir=directory)
        try:
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide it from the group
            with os.fdopen(fd, "wb") as handle:
                write(handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    fsync_dir(directory)
    remove_leftovers(path)  # of writers killed mid-write: garbage now


def _temporary_prefix(path: str) -> str:
    return f".{os.path.basename(path)}."


def remove_leftovers(path: str | os.PathLike[str]) -> None:
    """Remove the temporary files that writes of `path` killed midway (SIGKILL, a power
    cut) left beside it."""
    directory, prefix = os.path.dirname(os.path.abspath(path)), _temporary_prefix(os.fspath(path))
    with contextlib.suppress(OSError):  # no folder: nothing left
        for name in os.listdir(directory):
            if name.startswith(prefix) and name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(directory, name))


class _Stopped(BaseException):
    """A stop signal that came during a checkpoint write."""


@contextlib.contextmanager
def _stop_signals_raise() -> Iterator[None]:
    """While a file is written, SIGTERM, SIGHUP and SIGUSR1 (how launchers stop ranks, the
    terminal closing, Slurm's `scancel --signal=USR1`), whose default action ends the
    process on the spot, raise instead, so that the temporary file is removed; then the
    signal is given again with its default action, and the process ends as it would have.
    A handler of the script's own stays as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread can set handlers (and runs them)
        return
    came: list[int] = []

    def stop(signum: int, frame: object) -> None:
        came.append(signum)
        if len(came) == 1:  # a second one (launchers repeat theirs) must not cut the undoing
            raise _Stopped

    previous = {
        signum: signal.signal(signum, stop)
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)
        if signal.getsignal(signum) is signal.SIG_DFL
    }
    try:
        yield
    except _Stopped:
        pass  # the write is undone; the signal ends the process below
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if came:
            os.kill(os.getpid(), came[0])
            raise SystemExit(128 + came[0])  # only where the signal is blocked


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _weights_only_reason(text: str) -> str:
    """The specific reason in torch's multi-line "Weights only load failed" message."""
    marker = "WeightsUnpickler error:"
    if marker in text:
        return _first_sentence(text.split(marker, 1)[1]) or "unknown reason"
    boilerplate = ("Weights only load failed", "Please file an issue", "Check the documentation")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    reason = next((line for line in lines if not line.startswith(boilerplate)), "unknown reason")
    return _first_sentence(reason)


def _first_sentence(text: str) -> str:
    """The first sentence of an error message, without its full stop, at most 200 chars."""
    sentence = text.strip().splitlines()[0].split(". ")[0].rstrip(".") if text.strip() else ""
    return sentence if len(sentence) <= 200 else sentence[:197] + "..."


def load(path: str, what: str = "checkpoint", map_location: str | torch.device = "cpu") -> Any:
    """Load a checkpoint (onto the CPU unless `map_location` says otherwise) with
    weights_only=True; user-facing errors as UsageError naming it as `what`."""
    if not os.path.isfile(path):
        raise UsageError(f"{what} {path!r} does not exist: check the path")
    try:
        with warnings.catch_warnings():
            # A plain-pickle file makes torch warn about its protocol on top of our one line.
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        if "weights only" in str(error).lower() or "weights_only" in str(error):
            reason = _weights_only_reason(str(error))
            if "global" not in reason.lower():
                # e.g. "Unsupported operand 216": random bytes or a non-torch.save pickle.
                raise UsageError(
                    f"{what} {path!r} is corrupt or not written by torch.save (weights_only=True "
                    f"unpickling failed: {reason}): use an intact copy"
                ) from None
            raise UsageError(
                f"{what} {path!r} holds objects other than tensors and plain values, which "
                "could run code when loaded; refusing it (weights_only=True: "
                f"{reason}). Re-save it as a plain state_dict from a trusted source"
            ) from None
        first = _first_sentence(str(error).replace("\n", " ")) or type(error).__name__
        raise UsageError(f"{what} {path!r} is corrupt ({first}): use an intact copy") from None
    except IsADirectoryError:
        raise UsageError(f"{what} {path!r} is a directory: pass the checkpoint file") from None
    except PermissionError:
        raise UsageError(
            f"{what} {path!r} cannot be read (permission denied): check its permissions"
        ) from None
    except MemoryError:
        raise UsageError(
            f"{what} {path!r} claims more memory than this machine has: it is "
            "corrupt, or load it on a machine with more memory"
        ) from None
    except Exception as error:
        # Text, JSON or random bytes take torch's legacy (pre-zip) path, whose unpickler fails
        # with whatever the bytes happen to spell: KeyError, IndexError, struct.error, ...
        first = _first_sentence(str(error).replace("\n", " "))
        if not first or not isinstance(error, (RuntimeError, OSError, ValueError)):
            first = f"{type(error).__name__}: {first}" if first else type(error).__name__
        raise UsageError(
            f"{what} {path!r} is truncated or not a PyTorch checkpoint ({first}): use an intact "
            "copy, e.g. the previous checkpoint.pth.tar"
        ) from None


def load_state_dict_into(model: torch.nn.Module, state_dict: object, source: str) -> None:
    """Load `state_dict` (prefix stripped) into `model`, sharded or not; a mismatch is a
    UsageError."""
    if not isinstance(state_dict, dict):
        raise UsageError(
            f"{source} holds a {type(state_dict).__name__}, not a state_dict (a "
            "mapping of parameter names to tensors): pass a model's weights"
        )
    strange = next(
        (
            key
            for key, value in state_dict.items()
            if not isinstance(key, str) or not isinstance(value, torch.Tensor)
        ),
        None,
    )
    if strange is not None:
        raise UsageError(
            f"{source} is not a state_dict: its entry {strange!r:.60} is a "
            f"{type(state_dict[strange]).__name__}, not a tensor; pass a model's "
            "weights"
        )
    check_state_dict(model, state_dict, source)
    if is_sharded(model):
        from devicekit.sharded_checkpoint import load_full_into_sharded

        load_full_into_sharded(model, strip_prefix(state_dict))
        return
    try:
        model.load_state_dict(strip_prefix(state_dict))
    except RuntimeError as error:  # e.g. a sparse, complex or meta tensor in a weight's place
        reason = str(error).strip().splitlines()[-1].strip()[:120]
        raise UsageError(
            f"{source} holds tensors this model cannot take ({reason}): pass a model's weights"
        ) from None


def check_state_dict(model: torch.nn.Module, state_dict: Mapping[str, Any], source: str) -> None:
    """Refuse a state_dict whose names or shapes differ from `model`'s (a sharded model's
    shapes are its full ones), naming the first of each kind."""
    state_dict = strip_prefix(state_dict)
    own = model.state_dict()
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    wrong_shape = sorted(
        key
        for key in set(own) & set(state_dict)
        if tuple(own[key].shape) != tuple(state_dict[key].shape)
    )
    if missing or unexpected or wrong_shape:
        details = []
        for label, keys in (
            ("missing", missing),
            ("unexpected", unexpected),
            ("wrong shape", wrong_shape),
        ):
            if keys:
                details.append(f"{len(keys)} {label} (e.g. {keys[0]})")
        raise UsageError(
            f"{source} does not fit this model: {', '.join(details)}; check --arch "
            "and --num-classes"
        )


def fingerprint(model: torch.nn.Module) -> str:
    """A short hash of a model's parameters and buffers (wrappers and `module.` ignored):
    equal on every rank of a healthy data-parallel run, so one line per rank shows it. Of
    a sharded model, the full weights' hash (every rank must call it)."""
    digest = hashlib.sha256()
    for key, tensor in unwrap(model).state_dict().items():
        if hasattr(tensor, "full_tensor"):  # a DTensor of a sharded model: every rank gathers it
            tensor = tensor.full_tensor()
        digest.update(key.encode())
        digest.update(
            tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        )
    return digest.hexdigest()[:16]

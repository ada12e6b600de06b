"""Portable checkpoints: written atomically by one rank, loaded safely on any kind.

A checkpoint is a plain dict of tensors and plain values. It is written to a temporary
file beside the target, flushed, fsync'ed and renamed over the target, so a crash at any
moment leaves the previous checkpoint intact. Loading maps to the CPU first (a file
written on an NPU loads on a GPU or CPU) and uses `weights_only=True`, so a file that
would run code when unpickled is refused (the file itself: checkpoint_files.py and
atomic_write.py).
"""

import hashlib
import os
from collections.abc import Mapping
from typing import Any

import torch

from devicekit import runtime
from devicekit.accelerator import device as runtime_device
from devicekit.checkpoint_files import load, portable, save_atomic, strip_prefix
from devicekit.ddp import unwrap
from devicekit.errors import UsageError
from devicekit.sharding import holds_sharded, is_sharded, optimizer_owner


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

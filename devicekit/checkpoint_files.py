"""A checkpoint's file: its content made portable (modules as their state_dict, without DDP's
`module.` prefix), written atomically with every tensor on the CPU, and loaded safely
(weights_only=True, every refusal one line)."""

import os
import pickle
import warnings
from collections.abc import Mapping
from typing import Any, TypeVar

import torch

from devicekit.atomic_write import write_atomic
from devicekit.ddp import unwrap
from devicekit.errors import UsageError

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


def save_atomic(obj: Any, path: str) -> None:
    """torch.save `obj`, its tensors on the CPU, to `path` so that `path` is always either
    the old or the new file."""
    obj = on_cpu(obj)
    write_atomic(path, lambda handle: torch.save(obj, handle))


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

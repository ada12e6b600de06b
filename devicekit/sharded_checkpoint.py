"""Checkpoints of sharded models: a `torch.distributed.checkpoint` folder that every rank
writes its own shards into, read back safely and resharded on load (another world size,
another device kind: DCP stores CPU tensors).

The folder holds DCP's `.metadata` and shard files (modules and optimizers) and
`values.pt`, the plain values (step, epoch, schedulers' state) that rank 0 writes. It is
written beside its final name and renamed over it, so a run killed during a save leaves
the previous checkpoint whole. Reading never runs code from the folder: DCP's own reader
unpickles `.metadata` with plain pickle and its planner loads non-tensor entries with
`weights_only=False`; devicekit's reader and planner allow only plain values.
"""

import io
import os
import pickle
import shutil
import warnings
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta, TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from devicekit.atomic_write import fsync_dir
from devicekit.checkpoint_files import load, portable, save_atomic
from devicekit.errors import UsageError
from devicekit.sharding import optimizer_owner

VALUES = "values.pt"
METADATA = ".metadata"
_PARTIAL = ".partial"
_PREVIOUS = ".previous"


def full_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The full, unsharded state_dict of a sharded `model` on the CPU, on rank 0 (other
    ranks get an empty dict); every rank must call it."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    weights = get_model_state_dict(model, options=options)
    return {key: value for key, value in weights.items() if isinstance(value, torch.Tensor)}


def full_optimizer_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """The full state_dict of the optimizer of a sharded `model`, keyed by parameter
    position as torch writes an unsharded optimizer's, on the CPU of rank 0 (other ranks
    get an empty dict); every rank must call it."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    # torch types the values of its optimizer state loosely; this one is torch's own.
    state: dict[str, Any] = dict(get_optimizer_state_dict(model, optimizer, options=options))
    if not state:
        return {}
    names = {id(p): name for name, p in model.named_parameters()}
    position = {
        names[id(p)]: index
        for index, p in enumerate(p for group in optimizer.param_groups for p in group["params"])
    }
    return {
        "state": {position[name]: value for name, value in state["state"].items()},
        "param_groups": [
            {**group, "params": [position[name] for name in group["params"]]}
            for group in state["param_groups"]
        ],
    }


def load_full_into_sharded(model: torch.nn.Module, state: Mapping[str, Any]) -> None:
    """A full state_dict (a DDP or single-process checkpoint's) into a sharded model."""
    set_model_state_dict(model, dict(state), options=StateDictOptions(full_state_dict=True))


def load_full_optimizer_into_sharded(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]
) -> None:
    """A full optimizer state_dict, keyed by parameter position as torch writes it, into
    the optimizer of a sharded model (positions matched in order, as load_state_dict does)."""
    names = {id(p): name for name, p in model.named_parameters()}
    by_position = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    groups = state.get("param_groups", [])
    saved = [index for group in groups for index in group.get("params", [])]
    if len(saved) != len(by_position):
        raise UsageError(
            f"the checkpoint's optimizer updates {len(saved)} parameters, this one "
            f"{len(by_position)}: it was saved for another model"
        )
    fqn = dict(zip(saved, by_position, strict=True))
    try:
        converted: dict[str, Any] = {
            "state": {fqn[index]: value for index, value in state.get("state", {}).items()},
            "param_groups": [
                {**group, "params": [fqn[index] for index in group["params"]]} for group in groups
            ],
        }
    except (KeyError, TypeError) as error:
        raise UsageError(
            f"the checkpoint's optimizer state names parameter {error} that its groups do "
            "not: it is not an optimizer's state_dict"
        ) from None
    set_optimizer_state_dict(
        model, optimizer, converted, options=StateDictOptions(full_state_dict=True)
    )


def save_sharded(path: str, obj: Mapping[str, Any]) -> None:
    """Write `obj` (modules, optimizers, plain values) as a checkpoint folder at `path`;
    every rank calls it. The folder is complete or absent: never half written."""
    partial = path + _PARTIAL
    tensors, values = _split(obj)
    if dist.get_rank() == 0:
        shutil.rmtree(partial, ignore_errors=True)  # a save killed before
        os.makedirs(partial)
    dist.barrier()
    dcp.save(_gathered_states(tensors), checkpoint_id=partial)
    if dist.get_rank() == 0:
        save_atomic(portable(values), os.path.join(partial, VALUES))
        previous = path + _PREVIOUS
        if os.path.lexists(path):  # the last checkpoint (or a single-file one): kept aside
            _remove(previous)
            os.replace(path, previous)
        os.replace(partial, path)
        fsync_dir(os.path.dirname(os.path.abspath(path)))
        _remove(previous)
    dist.barrier()


def load_sharded(path: str, into: Mapping[str, Any]) -> dict[str, Any]:
    """Load the checkpoint folder `path` in place into the modules and optimizers of
    `into` (sharded or not, at any world size); return its plain values."""
    path = _complete_folder(path)
    reader = _SafeReader(path)
    metadata = reader.read_metadata()
    _check_files(path, metadata)
    tensors, _ = _split(into)
    states = _gathered_states(tensors)
    _check_fits(path, metadata, states)
    try:
        with warnings.catch_warnings():
            # Without a process group this is a load in one process, as DCP warns it assumes.
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(
                states,
                storage_reader=reader,
                planner=_SafePlanner(),
                no_dist=not dist.is_initialized(),
            )
    except dcp.CheckpointException as error:
        reason = _first_failure(error)
        raise UsageError(f"checkpoint {path!r} could not be read ({reason})") from None
    for key, (kind, module, optimizer) in tensors.items():
        if kind == "module":
            set_model_state_dict(module, states[key])
        else:
            set_optimizer_state_dict(module, optimizer, states[key])
    values = load(os.path.join(path, VALUES), "checkpoint values", map_location="cpu")
    if not isinstance(values, dict):
        raise UsageError(f"checkpoint {path!r}: {VALUES} is not a dict: use an intact copy")
    return values


def _split(obj: Mapping[str, Any]) -> tuple[dict[str, tuple[str, Any, Any]], dict[str, Any]]:
    """(modules and optimizers by key, with the module each optimizer belongs to; the rest)."""
    modules = {key: value for key, value in obj.items() if isinstance(value, torch.nn.Module)}
    tensors: dict[str, tuple[str, Any, Any]] = {
        key: ("module", module, None) for key, module in modules.items()
    }
    values: dict[str, Any] = {}
    for key, value in obj.items():
        if isinstance(value, torch.optim.Optimizer):
            tensors[key] = ("optimizer", _owner(key, value, modules), value)
        elif key not in modules:
            values[key] = value
    return tensors, values


def _owner(
    key: str, optimizer: torch.optim.Optimizer, modules: Mapping[str, torch.nn.Module]
) -> torch.nn.Module:
    """The module in the checkpoint whose parameters `optimizer` updates."""
    owner = optimizer_owner(optimizer, modules.values())
    if owner is not None:
        return owner
    raise UsageError(
        f"checkpoint entry {key!r}: the optimizer updates parameters of no model in the "
        "checkpoint: save the model beside it, e.g. {'model': model, 'optimizer': optimizer}"
    )


def _gathered_states(tensors: Mapping[str, tuple[str, Any, Any]]) -> dict[str, Any]:
    states: dict[str, Any] = {}
    for key, (kind, module, optimizer) in tensors.items():
        if kind == "module":
            states[key] = get_model_state_dict(module)
        else:
            states[key] = get_optimizer_state_dict(module, optimizer)
    return states


def _complete_folder(path: str) -> str:
    """`path`, or the previous checkpoint a save interrupted between its two renames left."""
    if os.path.isdir(path):
        return path
    if os.path.isdir(path + _PREVIOUS):
        return path + _PREVIOUS
    raise UsageError(f"checkpoint {path!r} does not exist: check the path")


def _check_files(path: str, metadata: Metadata) -> None:
    names = sorted({info.relative_path for info in (metadata.storage_data or {}).values()})
    for name in [*names, VALUES]:
        if not os.path.isfile(os.path.join(path, name)):
            raise UsageError(
                f"checkpoint {path!r} is incomplete: {name} is missing; copy the whole "
                "folder, or use the previous checkpoint"
            )


def _check_fits(path: str, metadata: Metadata, states: Mapping[str, Any]) -> None:
    """Refuse a checkpoint whose model entries differ from the target's by name or shape."""
    stored = metadata.state_dict_metadata
    for key, state in states.items():
        for name, tensor in state.items():
            if not isinstance(tensor, torch.Tensor):
                continue  # an optimizer's nested state: DCP checks it when loading
            fqn = f"{key}.{name}"
            entry = stored.get(fqn)
            if entry is None:
                raise UsageError(
                    f"checkpoint {path!r} does not fit this model: it has no {fqn!r}; it was "
                    "saved from another model"
                )
            if isinstance(entry, TensorStorageMetadata) and tuple(entry.size) != tuple(
                tensor.shape
            ):
                raise UsageError(
                    f"checkpoint {path!r} does not fit this model: {fqn!r} is "
                    f"{tuple(entry.size)} there and {tuple(tensor.shape)} here"
                )


def _first_failure(error: dcp.CheckpointException) -> str:
    for failure in error.failures.values():
        text = str(failure).strip().splitlines()
        return text[-1][:200] if text else type(failure).__name__
    return "unknown reason"


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP's `.metadata` and nothing else: the classes it is made of (as torch
    2.13 writes it), torch sizes, dtypes and layouts, and paths."""

    _ALLOWED = frozenset(
        {
            *(
                ("torch.distributed.checkpoint.metadata", name)
                for name in (
                    "Metadata",
                    "MetadataIndex",
                    "StorageMeta",
                    "TensorProperties",
                    "TensorStorageMetadata",
                    "BytesStorageMetadata",
                    "ChunkStorageMetadata",
                    "_MEM_FORMAT_ENCODING",
                )
            ),
            ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
            ("torch", "Size"),
            ("torch.serialization", "_get_layout"),
            ("collections", "OrderedDict"),
            ("pathlib", "PosixPath"),
            ("pathlib", "PurePosixPath"),
        }
    )

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in checkpoint metadata")


class _SafeReader(dcp.FileSystemReader):
    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        name = os.path.join(str(self.path), METADATA)
        try:
            with open(name, "rb") as handle:
                metadata = _MetadataUnpickler(handle).load()
        except FileNotFoundError:
            raise UsageError(
                f"checkpoint {str(self.path)!r} is incomplete: {METADATA} is missing; copy "
                "the whole folder, or use the previous checkpoint"
            ) from None
        except (pickle.UnpicklingError, EOFError, AttributeError, ValueError) as error:
            raise UsageError(
                f"checkpoint {str(self.path)!r}: {METADATA} is corrupt or holds objects that "
                f"could run code when loaded ({error}); refusing it"
            ) from None
        if not isinstance(metadata, Metadata):
            raise UsageError(f"checkpoint {str(self.path)!r}: {METADATA} is not DCP metadata")
        storage_meta = metadata.storage_meta or StorageMeta()
        storage_meta.load_id = self.load_id
        metadata.storage_meta = storage_meta
        return metadata


class _SafePlanner(DefaultLoadPlanner):
    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        # Refused here unless it is plain values; then DCP's own load of the same bytes
        # (weights_only=False) meets nothing but what weights_only allows.
        torch.load(value, weights_only=True)
        value.seek(0)
        super().load_bytes(read_item, value)

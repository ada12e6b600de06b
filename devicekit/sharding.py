"""Sharded data parallel on torch's own engine (FSDP2, `fully_shard`): parameters,
gradients and optimizer state split across the ranks, each repeated block on its own.

A model's blocks are the children of the outermost `nn.ModuleList` or `nn.Sequential`
whose children are all of one class (a transformer's layers, a ResNet stage's bottlenecks),
or the module classes the caller names. Each block is sharded on its own, then the root,
so only one block's parameters are gathered whole at a time.
"""

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from devicekit import accelerator, runtime
from devicekit.distributed import init_distributed
from devicekit.errors import UsageError

if TYPE_CHECKING:
    from torch.distributed.fsdp import MixedPrecisionPolicy

# FSDP and DTensor are imported by shard() only: importing them costs every process that
# imports devicekit about 0.9 s (torch.distributed.tensor most of it).
_FSDP = "torch.distributed.fsdp"

BlockSpec = Sequence[type[torch.nn.Module] | str]


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether `model` (or a module inside it) was sharded by `shard()`/`fully_shard`."""
    fsdp = sys.modules.get(_FSDP)  # not imported: nothing can be sharded
    return fsdp is not None and any(isinstance(m, fsdp.FSDPModule) for m in model.modules())


def optimizer_owner(
    optimizer: torch.optim.Optimizer, modules: Iterable[torch.nn.Module]
) -> torch.nn.Module | None:
    """The module among `modules` whose parameters `optimizer` updates, if any."""
    wanted = {id(p) for group in optimizer.param_groups for p in group["params"]}
    return next((m for m in modules if wanted <= {id(p) for p in m.parameters()}), None)


def holds_sharded(obj: object) -> bool:
    """Whether the checkpoint dict `obj` holds a sharded model."""
    return isinstance(obj, Mapping) and any(
        isinstance(value, torch.nn.Module) and is_sharded(value) for value in obj.values()
    )


def shard(
    model: torch.nn.Module,
    *,
    mixed_precision: bool | None = None,
    blocks: BlockSpec | None = None,
    activation_checkpointing: bool | BlockSpec = False,
) -> torch.nn.Module:
    """`model` sharded across the ranks of the process group (FSDP2), in place, on this
    rank's device: each block on its own, then the root. Use it instead of `wrap_ddp`
    when a model with its gradients and optimizer state does not fit one device; build the
    optimizer after this call, from the returned model's parameters.

    `blocks`: module classes (or class names) to shard on their own; by default the
    children of the outermost ModuleList or Sequential whose children share one class.
    `mixed_precision`: None follows the device (bf16 parameters with fp32 gradient
    reduction where it computes bf16 natively: GPUs with bf16, NPUs, CPUs with bf16
    instructions; fp32 elsewhere); True asks for it (fp16 where the device has no bf16);
    False keeps everything fp32. `activation_checkpointing`: True recomputes each block's
    activations in the backward pass instead of keeping them, or name the classes to
    recompute. In a single process the group of one is joined here. A model in
    channels_last gets contiguous (NCHW) weights, which FSDP2 requires: give it channels_last
    inputs and its activations stay channels_last.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    # Every argument is checked before anything changes.
    _check_wrappable(model)
    found = block_modules(model, blocks)
    recomputed = _recomputed(model, found, activation_checkpointing)
    policy = _precision_policy(mixed_precision)
    if not dist.is_initialized():
        if runtime.context().world_size > 1:
            raise UsageError(
                "shard() needs the process group of this run's "
                f"{runtime.context().world_size} ranks: call devicekit.init_distributed() "
                "first"
            )
        init_distributed()
    device = accelerator.device_for(runtime.context())
    # FSDP2 shards contiguous parameters only: a model already in channels_last goes back
    # to NCHW weights here, and channels_last inputs keep the activations channels_last.
    # (Module.to takes memory_format; torch's stub does not say so.)
    model.to(device, memory_format=torch.contiguous_format)  # type: ignore[call-overload]
    if recomputed:
        from torch.distributed._composable import checkpoint

        for module in recomputed:
            checkpoint(module)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for module in found:
        fully_shard(module, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


@contextlib.contextmanager
def unsharded(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Within the block every rank holds the whole of `model`'s parameters, so its forward
    passes need no collective and ranks may run different numbers of them: validation on
    an unevenly split set, generation on one rank. Every rank enters it (the parameters
    are gathered on entry and freed on exit); use it under torch.no_grad(). A model that
    is not sharded is yielded as it is."""
    if not is_sharded(model):
        yield model
        return
    from torch.distributed.fsdp import FSDPModule

    sharded = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for module in sharded:  # the same order on every rank: one all-gather each
        module.unshard()
        module.set_reshard_after_forward(False, recurse=False)
    try:
        yield model
    finally:
        for module in sharded:
            # shard()'s setting back: the blocks reshard after forward, the root (which
            # the backward needs first) does not.
            module.set_reshard_after_forward(module is not model, recurse=False)
            module.reshard()


def _check_wrappable(model: object) -> None:
    if not isinstance(model, torch.nn.Module):
        raise UsageError(
            f"shard() takes a torch.nn.Module, not a {type(model).__name__}: pass the model"
        )
    if isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
        raise UsageError(
            f"shard() got a model already wrapped in {type(model).__name__}: pass the bare "
            "model (shard() replaces wrap_ddp(), it does not go on top of it)"
        )
    if is_sharded(model):
        raise UsageError("shard() got a model that is already sharded: call it once per model")


def block_modules(model: torch.nn.Module, blocks: BlockSpec | None = None) -> list[torch.nn.Module]:
    """The modules `shard()` shards on their own, outermost first: instances of the named
    classes, or the children of the outermost ModuleList/Sequential of one class."""
    if blocks is not None:
        wanted = _classes_named(model, blocks, "blocks")
        return list(_outermost(model, lambda module: isinstance(module, wanted)))
    found: list[torch.nn.Module] = []
    for container in _outermost(model, _is_stack):
        found.extend(container.children())
    return found


def _is_stack(module: torch.nn.Module) -> bool:
    """A ModuleList or Sequential of at least two children, all of one class."""
    if not isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)):
        return False
    classes = {type(child) for child in module.children()}
    return len(module) >= 2 and len(classes) == 1


def _outermost(
    model: torch.nn.Module, matches: Callable[[torch.nn.Module], bool]
) -> Iterator[torch.nn.Module]:
    """Modules inside `model` (itself included) that match, not descending into a match."""
    if matches(model):
        yield model
        return
    for child in model.children():
        yield from _outermost(child, matches)


def _classes_named(
    model: torch.nn.Module, spec: BlockSpec, argument: str
) -> tuple[type[torch.nn.Module], ...]:
    """The classes `spec` names (classes, or names of classes used in `model`)."""
    by_name = {type(module).__name__: type(module) for module in model.modules()}
    classes: list[type[torch.nn.Module]] = []
    for item in spec:
        if isinstance(item, type) and issubclass(item, torch.nn.Module):
            classes.append(item)
        elif isinstance(item, str) and item in by_name:
            classes.append(by_name[item])
        else:
            known = ", ".join(sorted(by_name)[:8])
            raise UsageError(
                f"{argument}: {item!r} is not a module class of this model; name one of its "
                f"classes ({known}{', ...' if len(by_name) > 8 else ''})"
            )
    return tuple(classes)


def _recomputed(
    model: torch.nn.Module, found: list[torch.nn.Module], spec: bool | BlockSpec
) -> list[torch.nn.Module]:
    if spec is False:
        return []
    if spec is True:
        if not found:
            raise UsageError(
                "activation_checkpointing=True, but this model has no repeated blocks to "
                "recompute: name the module classes, e.g. activation_checkpointing=['Block']"
            )
        return found
    if isinstance(spec, str):
        spec = [spec]
    wanted = _classes_named(model, spec, "activation_checkpointing")
    return list(_outermost(model, lambda module: isinstance(module, wanted)))


def _precision_policy(mixed_precision: bool | None) -> "MixedPrecisionPolicy":
    """FSDP2's policy: low-precision parameters and fp32 gradient reduction, or fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    kind = runtime.kind()
    if mixed_precision is None:
        use = kind.computes_bf16_natively()
        dtype = torch.bfloat16
    elif mixed_precision is True:
        use = True
        if kind.is_bf16_supported():
            dtype = torch.bfloat16
        elif kind.is_accelerator:  # fp16, with devicekit.GradScaler()
            dtype = torch.float16
        else:
            raise UsageError(
                f"mixed_precision=True, but this {kind.name} device trains in neither bf16 "
                "nor fp16: leave mixed_precision unset (fp32)"
            )
    elif mixed_precision is False:
        use = False
        dtype = torch.float32
    else:
        raise UsageError(
            f"mixed_precision={mixed_precision!r} must be True, False or None (the device's choice)"
        )
    if not use:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)

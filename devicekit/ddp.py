"""DistributedDataParallel the portable way: device_ids by device kind, and the helpers a
training loop needs whether or not its model is wrapped."""

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from devicekit import runtime
from devicekit.errors import UsageError
from devicekit.sharding import is_sharded


def broadcast_buffers(module: torch.nn.Module, src: int = 0) -> None:
    """Copy rank `src`'s buffers (batch-norm statistics) to every rank, so all ranks
    evaluate the model that rank 0 checkpoints."""
    if not dist.is_initialized():
        return
    for buffer in module.buffers():
        dist.broadcast(buffer, src)


_DDP_ACCEPTS_FORWARD_SYNC = (
    "forward_sync_buffers"
    in torch.nn.parallel.DistributedDataParallel.__init__.__code__.co_varnames
)


def wrap_ddp(
    model: torch.nn.Module, **ddp_kwargs: Any
) -> torch.nn.parallel.DistributedDataParallel:
    """`model` in DistributedDataParallel with the device_ids its kind wants (accelerators:
    this rank's device; CPU: none), at every world size (1 included).

    Gradients are views into DDP's communication buckets (``gradient_as_bucket_view``):
    the same sums without two copies of every gradient per step. `broadcast_buffers=` is
    passed on as torch's newer `forward_sync_buffers=` where that exists. Other keyword
    arguments go to DistributedDataParallel unchanged.
    """
    if not dist.is_initialized():
        raise UsageError(
            "wrap_ddp() needs the process group: call devicekit.init_distributed() first"
        )
    if is_sharded(model):
        raise UsageError(
            "wrap_ddp() got a model sharded by devicekit.shard(): a sharded model already "
            "synchronises its gradients; use one of the two, not both"
        )
    kind, ctx = runtime.kind(), runtime.context()
    ddp_kwargs.setdefault("gradient_as_bucket_view", True)
    if _DDP_ACCEPTS_FORWARD_SYNC and "broadcast_buffers" in ddp_kwargs:
        ddp_kwargs.setdefault("forward_sync_buffers", ddp_kwargs.pop("broadcast_buffers"))
    return torch.nn.parallel.DistributedDataParallel(
        model, device_ids=kind.ddp_device_ids(ctx.device_index), **ddp_kwargs
    )


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside DistributedDataParallel, DataParallel and torch.compile wrappers."""
    while True:
        if isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            model = model.module
        elif hasattr(model, "_orig_mod") and isinstance(model._orig_mod, torch.nn.Module):
            model = model._orig_mod  # torch.compile's OptimizedModule
        else:
            return model


def no_sync(
    model: torch.nn.Module, enabled: bool = True
) -> contextlib.AbstractContextManager[None]:
    """A context in which `model`'s backward passes skip the gradient all-reduce (gradient
    accumulation): DDP's `no_sync()` when `enabled` and the model has one; for a sharded
    model, no reduce-scatter (its gradients accumulate unsharded until the last
    micro-step); else nothing."""
    # Called every micro-step: the sharded root's own method, not a walk over the modules.
    if enabled and hasattr(model, "set_requires_gradient_sync"):
        return _without_gradient_sync(model)
    if enabled:
        inner = getattr(model, "no_sync", None)
        if inner is not None:
            context: contextlib.AbstractContextManager[None] = inner()
            return context
    return contextlib.nullcontext()


@contextlib.contextmanager
def _without_gradient_sync(model: Any) -> Iterator[None]:
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)

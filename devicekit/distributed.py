"""Process-group setup and teardown: the backend from the kind, a finite timeout, and the
device bound before anything touches it."""

import contextlib
import datetime
import os
import time

import torch
import torch.distributed as dist

from devicekit.errors import UsageError, warn
from devicekit.network import interface_towards

DEFAULT_TIMEOUT_S = 300.0
_WORKER_DRAIN_S = 0.05  # see destroy_process_group

_BACKEND_OWNERS = {"nccl": "NVIDIA GPUs", "hccl": "Ascend NPUs (Habana Gaudi uses the same name)",
                   "gloo": "CPUs"}


def resolve_backend(kind, requested=None):
    """The backend to use on `kind`; a contradicting request is mapped with one warning."""
    if requested in (None, "", "auto"):
        return kind.backend
    requested = str(requested).lower()
    if requested in kind.accepted_backends:
        return requested
    backend = kind.backend
    owner = _BACKEND_OWNERS.get(requested, "another device")
    warn(f"--dist-backend {requested} is for {owner}, not {kind.name}; using {backend}")
    return backend


def timeout_seconds(timeout_s):
    """The process-group timeout in seconds: `timeout_s`, or the default when None."""
    timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s)
    if not timeout_s > 0:
        raise UsageError(f"--dist-timeout {timeout_s:g} must be a positive number of seconds")
    return timeout_s


def init_process_group(ctx, kind, backend=None, timeout_s=None):
    """Bind this rank's device, then join the process group described by `ctx`.

    Returns the backend in use, or None when the run has one process (no group needed).
    Setup failures users cause (a port in use, a rank that never arrives) raise
    UsageError naming the port or the timeout.
    """
    timeout_s = timeout_seconds(timeout_s)
    if kind.is_accelerator:
        kind.set_device(ctx.device_index)
    if not ctx.distributed:
        return None
    backend = resolve_backend(kind, backend)
    kind.prepare_process_group(timeout_s, os.environ)
    if backend == "gloo" and ctx.nnodes > 1 and "GLOO_SOCKET_IFNAME" not in os.environ:
        interface = interface_towards(ctx.master_addr, ctx.master_port)
        if interface:
            os.environ["GLOO_SOCKET_IFNAME"] = interface
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        if ctx.init_method == "env://" and ctx.mode != "env":
            # torchrun's workers join the store its agent already serves.
            dist.init_process_group(backend=backend, init_method="env://", rank=ctx.rank,
                                    world_size=ctx.world_size, timeout=timeout)
        else:
            store = _rendezvous(ctx, timeout_s)
            dist.init_process_group(backend=backend, store=store, rank=ctx.rank,
                                    world_size=ctx.world_size, timeout=timeout)
    except (RuntimeError, ValueError) as error:
        raise _explain_setup_error(error, ctx, timeout_s) from None
    return backend


def _rendezvous(ctx, timeout_s):
    """A TCP store on the master where every rank checks in, so that rank 0 can name the
    ranks that did not arrive within the timeout."""
    store = dist.TCPStore(ctx.master_addr, ctx.master_port, ctx.world_size,
                          is_master=ctx.rank == 0, timeout=datetime.timedelta(seconds=timeout_s),
                          wait_for_workers=False)
    store.set(f"devicekit/arrived/{ctx.rank}", "1")
    store.add("devicekit/arrivals", 1)
    if ctx.rank == 0:
        deadline = time.monotonic() + timeout_s
        # Poll a counter (store.wait would log a C++ warning line on timeout).
        while store.add("devicekit/arrivals", 0) < ctx.world_size:
            if time.monotonic() > deadline:
                missing = [rank for rank in range(ctx.world_size)
                           if not store.check([f"devicekit/arrived/{rank}"])]
                raise UsageError(
                    f"rank(s) {', '.join(map(str, missing))} of {ctx.world_size} did not join "
                    f"at {ctx.master_addr}:{ctx.master_port} within --dist-timeout "
                    f"{timeout_s:g}s: start every rank (same MASTER_ADDR/MASTER_PORT and "
                    "WORLD_SIZE) or check the network between the nodes")
            time.sleep(0.05)
    return dist.PrefixStore("devicekit/pg", store)


def _explain_setup_error(error, ctx, timeout_s):
    text = str(error)
    where = f"{ctx.master_addr}:{ctx.master_port}"
    if "address already in use" in text.lower() or "EADDRINUSE" in text:
        return UsageError(
            f"the master port {ctx.master_port} on {ctx.master_addr} is already in use: stop "
            "the process holding it (a previous run?) or choose another with MASTER_PORT/--port")
    if "connect" in text.lower() or "refused" in text.lower():
        return UsageError(
            f"rank {ctx.rank}: cannot reach the master at {where}: check MASTER_ADDR/MASTER_PORT "
            f"and that rank 0 is running ({text.strip().splitlines()[0]})")
    if "timed out" in text.lower() or "timeout" in text.lower():
        return UsageError(
            f"rank {ctx.rank}: not all {ctx.world_size} ranks joined at {where} within "
            f"--dist-timeout {timeout_s:g}s; start every rank, check MASTER_ADDR/MASTER_PORT "
            f"and the network ({text.strip().splitlines()[0]})")
    return error


def destroy_process_group():
    """Leave the process group if this process joined one (safe to call on every exit path)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        # Once a DistributedDataParallel was built, torch keeps the group alive past this
        # call, and with it gloo's worker threads. A worker may still be dropping the last
        # collective's tensors, which needs the GIL; if the interpreter is shutting down by
        # then, the process aborts ("terminate called without an active exception", SIGABRT)
        # after a run that succeeded -- 1 in 4-10 `--evaluate` runs under torchrun here.
        # Release the GIL for a moment so that they finish while Python is alive.
        time.sleep(_WORKER_DRAIN_S)


@contextlib.contextmanager
def process_group(ctx, kind, backend=None, timeout_s=None):
    """Context manager: join on entry, always leave on exit (errors included)."""
    try:
        yield init_process_group(ctx, kind, backend, timeout_s)
    finally:
        destroy_process_group()


def barrier():
    """Wait for every rank (no-op without a process group)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()



def wrap_ddp(model, kind, ctx, **kwargs):
    """`model` wrapped in DistributedDataParallel for a multi-rank run (else unchanged),
    with the device_ids the kind wants (accelerators: this rank's device; CPU: none).

    Gradients are views into DDP's communication buckets (``gradient_as_bucket_view``):
    the same sums without two copies of every gradient per step; on a 2-core CPU host this
    alone is about 10 % of a resnet18 step. `kwargs` go to DistributedDataParallel.
    """
    if not ctx.distributed:
        return model
    kwargs.setdefault("gradient_as_bucket_view", True)
    return torch.nn.parallel.DistributedDataParallel(
        model, device_ids=kind.ddp_device_ids(ctx.device_index), **kwargs)


def broadcast_buffers(module, src=0):
    """Copy rank `src`'s buffers (batch-norm statistics) to every rank, so all ranks
    evaluate the model that rank 0 checkpoints."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    for buffer in module.buffers():
        dist.broadcast(buffer, src)


def all_reduce_sum(tensor):
    """Sum `tensor` over all ranks in place (no-op without a process group); returns it."""
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(tensor)
    return tensor

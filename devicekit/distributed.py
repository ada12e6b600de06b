"""Joining and leaving the process group, who this rank is, and its collectives.

`init_distributed()` binds the rank's device, sizes its CPU threads and joins the group
with the kind's backend and a finite timeout -- at world size 1 too, so that
DistributedSampler, `dist.get_rank()` and DDP behave as under any launcher.
"""

import atexit
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

from devicekit import kinds, rendezvous, runtime
from devicekit.environments import LaunchContext, LaunchOptions
from devicekit.errors import UsageError, keep_lines_whole, warn
from devicekit.kinds.base import DeviceKind
from devicekit.network import interface_towards

DEFAULT_TIMEOUT_S = 300.0
_WORKER_DRAIN_S = 0.05  # see destroy_process_group


def resolve_backend(kind: DeviceKind, requested: str | None = None, name: str = "backend") -> str:
    """The backend to use on `kind`; a contradicting request is mapped with one warning."""
    if requested in (None, "", "auto"):
        return kind.backend
    requested = str(requested).lower()
    if requested in kind.accepted_backends:
        return requested
    backend = kind.backend
    owner = kinds.backend_owner(requested) or "another device"
    shown = f"{name} {requested}" if name.startswith("--") else f"{name}={requested!r}"
    warn(f"{shown} is for {owner}, not {kind.name}; using {backend}")
    return backend


def timeout_seconds(timeout: float | datetime.timedelta | None, name: str = "timeout") -> float:
    """The process-group timeout in seconds: `timeout` (seconds or a timedelta), or the
    default (300 s) when None. `name` is how the caller calls it in the error."""
    if timeout is None:
        return DEFAULT_TIMEOUT_S
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        shown = f"{name} {timeout}" if name.startswith("--") else f"{name}={timeout!r}"
        raise UsageError(f"{shown} must be a positive, finite number of seconds")
    return seconds


def init_distributed(
    backend: str | None = None,
    *,
    init_method: str | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    local_rank: int | None = None,
    timeout: float | datetime.timedelta | None = None,
    device_type: str | None = None,
    options: LaunchOptions | None = None,
) -> LaunchContext:
    """Bind this rank's device, size its CPU threads and join the process group.

    Works under every launcher, inside `devicekit.launch()`, and in a script's own
    `mp.spawn` child when told `rank=` and `world_size=` (then `MASTER_ADDR`/`MASTER_PORT`
    or `init_method="tcp://HOST:PORT"` say where rank 0 listens; loopback:29500 by
    default). Without any of those this is a single process, and still joins a group of
    one. `backend` defaults to the device's (nccl, hccl, gloo); `timeout` (seconds, default
    300) bounds the wait for every rank. Calling it again returns the same context.
    Returns the LaunchContext: rank, world size, local rank, node, master.
    """
    options = options or LaunchOptions(
        rank=rank, world_size=world_size, local_rank=local_rank, dist_url=init_method
    )
    kind = runtime.kind(device_type, source="--device" if options.cli else "device_type")
    timeout_s = timeout_seconds(timeout, "--dist-timeout" if options.cli else "timeout")
    timeout_label = (
        f"--dist-timeout {timeout_s:g}s" if options.cli else f"the timeout of {timeout_s:g}s"
    )
    if dist.is_available() and dist.is_initialized():
        return _adopt_existing_group(kind)
    if runtime.has_context():
        ctx = runtime.context()
        runtime.warn_if_contradicted(options, ctx)
    else:
        ctx = runtime.context(options)
    if ctx.distributed:
        keep_lines_whole()
    runtime.settle_master(ctx)
    if kind.is_accelerator:
        kind.set_device(ctx.device_index)
        runtime.bind_device()
    kind.configure_host_threads(ctx.local_world_size, os.environ)
    backend = resolve_backend(kind, backend, "--dist-backend" if options.cli else "backend")
    _join(ctx, kind, backend, timeout_s, timeout_label)
    return ctx


def _adopt_existing_group(kind: DeviceKind) -> LaunchContext:
    """The context of a group the script (or an earlier call) already joined."""
    if runtime.has_context():
        return runtime.context()
    ctx = runtime.context()
    if (dist.get_rank(), dist.get_world_size()) != (ctx.rank, ctx.world_size):
        raise UsageError(
            f"a process group already exists (rank {dist.get_rank()} of "
            f"{dist.get_world_size()}) that disagrees with this process's launcher (rank "
            f"{ctx.rank} of {ctx.world_size}): call init_distributed() instead of "
            "torch.distributed.init_process_group(), not both"
        )
    return ctx


def _join(
    ctx: LaunchContext, kind: DeviceKind, backend: str, timeout_s: float, timeout_label: str
) -> None:
    """Join the group `ctx` describes; setup failures users cause raise UsageError."""
    timeout = datetime.timedelta(seconds=timeout_s)
    # A script that never leaves the group leaves at exit, while Python still runs (see
    # destroy_process_group).
    atexit.unregister(destroy_process_group)
    atexit.register(destroy_process_group)
    if not ctx.distributed:
        # A group of one needs no network: an in-process store.
        dist.init_process_group(
            backend=backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout
        )
        return
    kind.prepare_process_group(timeout_s, os.environ)
    if backend == "gloo" and ctx.nnodes > 1 and "GLOO_SOCKET_IFNAME" not in os.environ:
        interface = interface_towards(ctx.master_addr, ctx.master_port)
        if interface:
            os.environ["GLOO_SOCKET_IFNAME"] = interface
    try:
        store: dist.Store | None
        if ctx.launcher_store and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            store = rendezvous.agent_store(ctx, timeout_s, timeout_label)
        elif ctx.launcher_store:
            store = None  # an agent that serves no store: env:// makes rank 0 serve one
        else:
            store = rendezvous.rendezvous(ctx, timeout_s, timeout_label)
        dist.init_process_group(
            backend=backend,
            store=store,
            rank=ctx.rank,
            world_size=ctx.world_size,
            timeout=timeout,
            init_method="env://" if store is None else None,
        )
        if backend == "gloo":
            # gloo's ranks connect to one another asymmetrically: a rank can be through
            # while rank 0 still connects, and a rank that leaves at once (a script with
            # nothing to do, a fast rank under load) made rank 0 fail with "Connection
            # closed by peer". No rank returns before every rank is connected.
            dist.barrier()
    except (RuntimeError, ValueError) as error:
        raise rendezvous.explain_setup_error(error, ctx, timeout_label) from None


def is_initialized() -> bool:
    """Whether this process has joined a process group."""
    return dist.is_available() and dist.is_initialized()


def destroy_process_group() -> None:
    """Leave the process group if this process joined one (safe to call on every exit path)."""
    if is_initialized():
        dist.destroy_process_group()
        # Once a DistributedDataParallel was built, torch keeps the group alive past this
        # call, and with it gloo's worker threads. A worker may still be dropping the last
        # collective's tensors, which needs the GIL; if the interpreter is shutting down by
        # then, the process aborts ("terminate called without an active exception", SIGABRT)
        # after a run that succeeded -- 1 in 4-10 `--evaluate` runs under torchrun here.
        # Release the GIL for a moment so that they finish while Python is alive.
        time.sleep(_WORKER_DRAIN_S)
        _forget_sharding_plans()


def _forget_sharding_plans() -> None:
    """Drop DTensor's cached sharding plans. They hold the device mesh they were made for,
    and a mesh built later in this process compares equal to it: a second init_distributed()
    and shard() would reuse the plans and send collectives to the group destroyed here
    ("Could not resolve the process group registered under the name ...")."""
    if "torch.distributed.tensor" in sys.modules:
        from torch.distributed.tensor.debug import _clear_sharding_prop_cache

        _clear_sharding_prop_cache()  # type: ignore[no-untyped-call]


# -- who this rank is -------------------------------------------------------------------


def rank() -> int:
    """This process's global rank (0 in a single process)."""
    return runtime.context().rank


def world_size() -> int:
    """How many processes take part in the run."""
    return runtime.context().world_size


def local_rank() -> int:
    """This process's index among the processes of its node."""
    return runtime.context().local_rank


def local_world_size() -> int:
    """How many processes run on this node."""
    return runtime.context().local_world_size


def node_rank() -> int:
    """This node's index among the run's nodes."""
    return runtime.context().node_rank


def is_main_process() -> bool:
    """Whether this is global rank 0 (the one that prints and writes)."""
    return runtime.context().rank == 0


# -- collectives and DDP ----------------------------------------------------------------


def barrier() -> None:
    """Wait for every rank (no-op without a process group)."""
    if is_initialized():
        dist.barrier()


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `tensor` over all ranks in place (no-op without a process group); returns it."""
    if is_initialized():
        dist.all_reduce(tensor)
    return tensor

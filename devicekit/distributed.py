"""Joining and leaving the process group, who this rank is, and DDP helpers.

`init_distributed()` binds the rank's device, sizes its CPU threads and joins the group
with the kind's backend and a finite timeout -- at world size 1 too, so that
DistributedSampler, `dist.get_rank()` and DDP behave as under any launcher.
"""

import atexit
import contextlib
import datetime
import os
import socket
import threading
import time
from typing import Optional, Union

import torch
import torch.distributed as dist

from devicekit import kinds, runtime
from devicekit.errors import UsageError, warn
from devicekit.launch import LaunchContext, LaunchOptions
from devicekit.network import interface_towards

DEFAULT_TIMEOUT_S = 300.0
STORE_MARGIN_S = 5.0  # beyond the timeout, for the store client to give up on its own first
PROBE_S = 3.0  # asking whether a taken port is this run's rendezvous
_WORKER_DRAIN_S = 0.05  # see destroy_process_group


def resolve_backend(kind, requested=None, name="backend"):
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


def timeout_seconds(timeout, name="timeout"):
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


def init_distributed(backend: Optional[str] = None, *, init_method: Optional[str] = None,
                     rank: Optional[int] = None, world_size: Optional[int] = None,
                     local_rank: Optional[int] = None,
                     timeout: Union[float, datetime.timedelta, None] = None,
                     device_type: Optional[str] = None,
                     options: Optional[LaunchOptions] = None) -> LaunchContext:
    """Bind this rank's device, size its CPU threads and join the process group.

    Works under every launcher, inside `devicekit.launch()`, and in a script's own
    `mp.spawn` child when told `rank=` and `world_size=` (then `MASTER_ADDR`/`MASTER_PORT`
    or `init_method="tcp://HOST:PORT"` say where rank 0 listens; loopback:29500 by
    default). Without any of those this is a single process, and still joins a group of
    one. `backend` defaults to the device's (nccl, hccl, gloo); `timeout` (seconds, default
    300) bounds the wait for every rank. Calling it again returns the same context.
    Returns the LaunchContext: rank, world size, local rank, node, master.
    """
    options = options or LaunchOptions(rank=rank, world_size=world_size, local_rank=local_rank,
                                       dist_url=init_method)
    kind = runtime.kind(device_type, source="--device" if options.cli else "device_type")
    timeout_s = timeout_seconds(timeout, "--dist-timeout" if options.cli else "timeout")
    timeout_label = (f"--dist-timeout {timeout_s:g}s" if options.cli
                     else f"the timeout of {timeout_s:g}s")
    if dist.is_available() and dist.is_initialized():
        return _adopt_existing_group(kind)
    if runtime.has_context():
        ctx = runtime.context()
        runtime.warn_if_contradicted(options, ctx)
    else:
        ctx = runtime.context(options)
    runtime.settle_master(ctx)
    if kind.is_accelerator:
        kind.set_device(ctx.device_index)
        runtime.bind_device()
    kind.configure_host_threads(ctx.local_world_size, os.environ)
    backend = resolve_backend(kind, backend, "--dist-backend" if options.cli else "backend")
    _join(ctx, kind, backend, timeout_s, timeout_label)
    return ctx


def _adopt_existing_group(kind):
    """The context of a group the script (or an earlier call) already joined."""
    if runtime.has_context():
        return runtime.context()
    ctx = runtime.context()
    if (dist.get_rank(), dist.get_world_size()) != (ctx.rank, ctx.world_size):
        raise UsageError(
            f"a process group already exists (rank {dist.get_rank()} of "
            f"{dist.get_world_size()}) that disagrees with this process's launcher (rank "
            f"{ctx.rank} of {ctx.world_size}): call init_distributed() instead of "
            "torch.distributed.init_process_group(), not both")
    return ctx


def _join(ctx, kind, backend, timeout_s, timeout_label):
    """Join the group `ctx` describes; setup failures users cause raise UsageError."""
    timeout = datetime.timedelta(seconds=timeout_s)
    # A script that never leaves the group leaves at exit, while Python still runs (see
    # destroy_process_group).
    atexit.unregister(destroy_process_group)
    atexit.register(destroy_process_group)
    if not ctx.distributed:
        # A group of one needs no network: an in-process store.
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1,
                                timeout=timeout)
        return
    kind.prepare_process_group(timeout_s, os.environ)
    if backend == "gloo" and ctx.nnodes > 1 and "GLOO_SOCKET_IFNAME" not in os.environ:
        interface = interface_towards(ctx.master_addr, ctx.master_port)
        if interface:
            os.environ["GLOO_SOCKET_IFNAME"] = interface
    try:
        if ctx.launcher_store and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            store = _agent_store(ctx, timeout_s, timeout_label)
        elif ctx.launcher_store:
            store = None  # an agent that serves no store: env:// makes rank 0 serve one
        else:
            store = _rendezvous(ctx, timeout_s, timeout_label)
        dist.init_process_group(backend=backend, store=store, rank=ctx.rank,
                                world_size=ctx.world_size, timeout=timeout,
                                init_method="env://" if store is None else None)
    except (RuntimeError, ValueError) as error:
        raise _explain_setup_error(error, ctx, timeout_label) from None


def _agent_store(ctx, timeout_s, timeout_label):
    """The store torchrun's agent serves, under a prefix for this restart: torchrun keeps
    one store across --max-restarts, and a restarted rank could otherwise read a peer's
    address left there by the attempt before (gloo then fails, "Connection refused")."""
    done, store = _bounded(timeout_s + STORE_MARGIN_S, lambda: dist.TCPStore(
        ctx.master_addr, ctx.master_port, ctx.world_size, is_master=False,
        timeout=datetime.timedelta(seconds=timeout_s)))
    if not done:
        raise UsageError(f"rank {ctx.rank}: the launcher's store at {ctx.master_addr}:"
                         f"{ctx.master_port} did not answer within {timeout_label} "
                         f"(+{STORE_MARGIN_S:g}s)")
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"devicekit/attempt{attempt}", store)


def _bounded(seconds, call):
    """`call()`, given at most `seconds`: torch's store client waits forever on a port
    where something that is not a torch store listens, and name lookups can hang. Returns
    (True, result) or (False, None) on time-out; the abandoned thread is a daemon."""
    outcome = {}

    def run():
        try:
            outcome["result"] = call()
        except BaseException as error:  # handed to the caller's thread below
            outcome["error"] = error

    thread = threading.Thread(target=run, name="devicekit-bounded", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        return False, None
    if "error" in outcome:
        raise outcome["error"]
    return True, outcome["result"]


def _resolve_master(ctx, timeout_s, timeout_label):
    """Fail in one line when the master's host name does not resolve (in bounded time)."""
    try:
        done, _ = _bounded(timeout_s, lambda: socket.getaddrinfo(ctx.master_addr,
                                                                ctx.master_port))
    except OSError as error:
        raise UsageError(f"the master address {ctx.master_addr!r} does not resolve "
                         f"({error.strerror or error}): set MASTER_ADDR (or --addr) to node 0's "
                         "host name or IP address") from None
    if not done:
        raise UsageError(f"looking up the master address {ctx.master_addr!r} took longer than "
                         f"{timeout_label}: check MASTER_ADDR and this host's DNS")


def _rendezvous(ctx, timeout_s, timeout_label):
    """A TCP store on the master where every rank checks in under its rank, so that rank 0
    can name the ranks that did not arrive within the timeout, and a rank claimed twice
    is named as such. Every wait is bounded by the timeout (plus STORE_MARGIN_S)."""
    _resolve_master(ctx, timeout_s, timeout_label)
    where = f"{ctx.master_addr}:{ctx.master_port}"
    try:
        done, store = _bounded(timeout_s + STORE_MARGIN_S, lambda: dist.TCPStore(
            ctx.master_addr, ctx.master_port, ctx.world_size, is_master=ctx.rank == 0,
            timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False))
    except (RuntimeError, ValueError) as error:
        if ctx.rank == 0 and _is_address_in_use(error) and _rank_zero_listens(ctx):
            raise UsageError(
                f"two processes claim rank 0: another one already serves this run's "
                f"rendezvous at {where}; give every process its own rank (RANK/--rank), or "
                "stop the previous run") from None
        raise
    if not done:
        raise UsageError(
            f"rank {ctx.rank}: something listens at {where} but did not answer as a torch "
            f"store within {timeout_label} (+{STORE_MARGIN_S:g}s): MASTER_PORT belongs to "
            "another service? Choose a free port for MASTER_PORT on node 0")
    if store.add(f"devicekit/claims/{ctx.rank}", 1) > 1:
        raise UsageError(
            f"two processes claim rank {ctx.rank} at {ctx.master_addr}:{ctx.master_port}: "
            "give every process its own rank (RANK/--rank)")
    if ctx.rank == 0:
        deadline = time.monotonic() + timeout_s
        keys = [f"devicekit/claims/{rank}" for rank in range(ctx.world_size)]
        # Poll (store.wait would log a C++ warning line on timeout).
        while not store.check(keys):
            if time.monotonic() > deadline:
                missing = [rank for rank, key in enumerate(keys) if not store.check([key])]
                raise UsageError(
                    f"rank(s) {', '.join(map(str, missing))} of {ctx.world_size} did not join "
                    f"at {where} within {timeout_label}: start every rank (same "
                    "MASTER_ADDR/MASTER_PORT and "
                    "WORLD_SIZE) or check the network between the nodes")
            time.sleep(0.05)
    return dist.PrefixStore("devicekit/pg", store)


def _is_address_in_use(error):
    text = str(error)
    return "address already in use" in text.lower() or "EADDRINUSE" in text


def _rank_zero_listens(ctx):
    """Whether the port is held by a devicekit rendezvous whose rank 0 has checked in."""
    def ask():
        client = dist.TCPStore(ctx.master_addr, ctx.master_port, is_master=False,
                               timeout=datetime.timedelta(seconds=PROBE_S),
                               wait_for_workers=False)
        deadline = time.monotonic() + PROBE_S / 2
        # The other rank 0 claims its rank a moment after it starts listening.
        while not client.check(["devicekit/claims/0"]):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    try:
        done, claimed = _bounded(PROBE_S, ask)
    except (RuntimeError, ValueError):
        return False
    return done and claimed


def _explain_setup_error(error, ctx, timeout_label):
    text = str(error)
    where = f"{ctx.master_addr}:{ctx.master_port}"
    if _is_address_in_use(error):
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
            f"{timeout_label}; start every rank, check MASTER_ADDR/MASTER_PORT "
            f"and the network ({text.strip().splitlines()[0]})")
    return error


def is_initialized() -> bool:
    """Whether this process has joined a process group."""
    return dist.is_available() and dist.is_initialized()


def destroy_process_group():
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

def barrier():
    """Wait for every rank (no-op without a process group)."""
    if is_initialized():
        dist.barrier()


def all_reduce_sum(tensor):
    """Sum `tensor` over all ranks in place (no-op without a process group); returns it."""
    if is_initialized():
        dist.all_reduce(tensor)
    return tensor


def broadcast_buffers(module, src=0):
    """Copy rank `src`'s buffers (batch-norm statistics) to every rank, so all ranks
    evaluate the model that rank 0 checkpoints."""
    if not is_initialized():
        return
    for buffer in module.buffers():
        dist.broadcast(buffer, src)


_DDP_ACCEPTS_FORWARD_SYNC = "forward_sync_buffers" in \
    torch.nn.parallel.DistributedDataParallel.__init__.__code__.co_varnames


def wrap_ddp(model: torch.nn.Module, **ddp_kwargs) -> torch.nn.parallel.DistributedDataParallel:
    """`model` in DistributedDataParallel with the device_ids its kind wants (accelerators:
    this rank's device; CPU: none), at every world size (1 included).

    Gradients are views into DDP's communication buckets (``gradient_as_bucket_view``):
    the same sums without two copies of every gradient per step. `broadcast_buffers=` is
    passed on as torch's newer `forward_sync_buffers=` where that exists. Other keyword
    arguments go to DistributedDataParallel unchanged.
    """
    if not is_initialized():
        raise UsageError("wrap_ddp() needs the process group: call devicekit.init_distributed() "
                         "first")
    kind, ctx = runtime.kind(), runtime.context()
    ddp_kwargs.setdefault("gradient_as_bucket_view", True)
    if _DDP_ACCEPTS_FORWARD_SYNC and "broadcast_buffers" in ddp_kwargs:
        ddp_kwargs.setdefault("forward_sync_buffers", ddp_kwargs.pop("broadcast_buffers"))
    return torch.nn.parallel.DistributedDataParallel(
        model, device_ids=kind.ddp_device_ids(ctx.device_index), **ddp_kwargs)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside DistributedDataParallel, DataParallel and torch.compile wrappers."""
    while True:
        if isinstance(model, (torch.nn.parallel.DistributedDataParallel,
                              torch.nn.DataParallel)):
            model = model.module
        elif hasattr(model, "_orig_mod") and isinstance(model._orig_mod, torch.nn.Module):
            model = model._orig_mod  # torch.compile's OptimizedModule
        else:
            return model


def no_sync(model: torch.nn.Module, enabled: bool = True):
    """A context in which `model`'s backward passes skip the gradient all-reduce (gradient
    accumulation): DDP's `no_sync()` when `enabled` and the model has one, else nothing."""
    if enabled:
        inner = getattr(model, "no_sync", None)
        if inner is not None:
            return inner()
    return contextlib.nullcontext()

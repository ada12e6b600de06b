"""Where the ranks of a run meet: devicekit's rendezvous on the master, or the store of
torchrun's agent; every wait bounded by the timeout (plus STORE_MARGIN_S), every failure a
user causes one line that names the address, the port or the missing ranks."""

import datetime
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Literal, TypeVar

import torch.distributed as dist

from devicekit.environments import LaunchContext
from devicekit.errors import UsageError

STORE_MARGIN_S = 5.0  # beyond the timeout, for the store client to give up on its own first
PROBE_S = 3.0  # asking whether a taken port is this run's rendezvous

_T = TypeVar("_T")


def agent_store(ctx: LaunchContext, timeout_s: float, timeout_label: str) -> dist.PrefixStore:
    """The store torchrun's agent serves, under a prefix for this restart: torchrun keeps
    one store across --max-restarts, and a restarted rank could otherwise read a peer's
    address left there by the attempt before (gloo then fails, "Connection refused")."""
    bounded = _bounded(
        timeout_s + STORE_MARGIN_S,
        lambda: dist.TCPStore(
            ctx.master_addr,
            ctx.master_port,
            ctx.world_size,
            is_master=False,
            timeout=datetime.timedelta(seconds=timeout_s),
        ),
    )
    if not bounded[0]:
        raise UsageError(
            f"rank {ctx.rank}: the launcher's store at {ctx.master_addr}:"
            f"{ctx.master_port} did not answer within {timeout_label} "
            f"(+{STORE_MARGIN_S:g}s)"
        )
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"devicekit/attempt{attempt}", bounded[1])


def _bounded(
    seconds: float, call: Callable[[], _T]
) -> tuple[Literal[True], _T] | tuple[Literal[False], None]:
    """`call()`, given at most `seconds`: torch's store client waits forever on a port
    where something that is not a torch store listens, and name lookups can hang. Returns
    (True, result) or (False, None) on time-out; the abandoned thread is a daemon."""
    results: list[_T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(call())
        except BaseException as error:  # handed to the caller's thread below
            errors.append(error)

    thread = threading.Thread(target=run, name="devicekit-bounded", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        return False, None
    if errors:
        raise errors[0]
    return True, results[0]


def _resolve_master(ctx: LaunchContext, timeout_s: float, timeout_label: str) -> None:
    """Fail in one line when the master's host name does not resolve (in bounded time)."""
    try:
        done, _ = _bounded(timeout_s, lambda: socket.getaddrinfo(ctx.master_addr, ctx.master_port))
    except OSError as error:
        raise UsageError(
            f"the master address {ctx.master_addr!r} does not resolve "
            f"({error.strerror or error}): set MASTER_ADDR (or --addr) to node 0's "
            "host name or IP address"
        ) from None
    if not done:
        raise UsageError(
            f"looking up the master address {ctx.master_addr!r} took longer than "
            f"{timeout_label}: check MASTER_ADDR and this host's DNS"
        )


def rendezvous(ctx: LaunchContext, timeout_s: float, timeout_label: str) -> dist.PrefixStore:
    """A TCP store on the master where every rank checks in under its rank, so that rank 0
    can name the ranks that did not arrive within the timeout, and a rank claimed twice
    is named as such. Every wait is bounded by the timeout (plus STORE_MARGIN_S)."""
    _resolve_master(ctx, timeout_s, timeout_label)
    where = f"{ctx.master_addr}:{ctx.master_port}"
    try:
        bounded = _bounded(
            timeout_s + STORE_MARGIN_S,
            lambda: dist.TCPStore(
                ctx.master_addr,
                ctx.master_port,
                ctx.world_size,
                is_master=ctx.rank == 0,
                timeout=datetime.timedelta(seconds=timeout_s),
                wait_for_workers=False,
            ),
        )
    except (RuntimeError, ValueError) as error:
        if ctx.rank == 0 and _is_address_in_use(error) and _rank_zero_listens(ctx):
            raise UsageError(
                f"two processes claim rank 0: another one already serves this run's "
                f"rendezvous at {where}; give every process its own rank (RANK/--rank), or "
                "stop the previous run"
            ) from None
        raise
    if not bounded[0]:
        raise UsageError(
            f"rank {ctx.rank}: something listens at {where} but did not answer as a torch "
            f"store within {timeout_label} (+{STORE_MARGIN_S:g}s): MASTER_PORT belongs to "
            "another service? Choose a free port for MASTER_PORT on node 0"
        )
    store = bounded[1]
    if store.add(f"devicekit/claims/{ctx.rank}", 1) > 1:
        raise UsageError(
            f"two processes claim rank {ctx.rank} at {ctx.master_addr}:{ctx.master_port}: "
            "give every process its own rank (RANK/--rank)"
        )
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
                    "WORLD_SIZE) or check the network between the nodes"
                )
            time.sleep(0.05)
    return dist.PrefixStore("devicekit/pg", store)


def _is_address_in_use(error: BaseException) -> bool:
    text = str(error)
    return "address already in use" in text.lower() or "EADDRINUSE" in text


def _rank_zero_listens(ctx: LaunchContext) -> bool:
    """Whether the port is held by a devicekit rendezvous whose rank 0 has checked in."""

    def ask() -> bool:
        client = dist.TCPStore(
            ctx.master_addr,
            ctx.master_port,
            is_master=False,
            timeout=datetime.timedelta(seconds=PROBE_S),
            wait_for_workers=False,
        )
        deadline = time.monotonic() + PROBE_S / 2
        # The other rank 0 claims its rank a moment after it starts listening.
        while not client.check(["devicekit/claims/0"]):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    try:
        bounded = _bounded(PROBE_S, ask)
    except (RuntimeError, ValueError):
        return False
    return bounded[0] and bounded[1]


def explain_setup_error(
    error: RuntimeError | ValueError, ctx: LaunchContext, timeout_label: str
) -> Exception:
    text = str(error)
    where = f"{ctx.master_addr}:{ctx.master_port}"
    if _is_address_in_use(error):
        return UsageError(
            f"the master port {ctx.master_port} on {ctx.master_addr} is already in use: stop "
            "the process holding it (a previous run?) or choose another with MASTER_PORT/--port"
        )
    if "closed by peer" in text.lower():
        # gloo's connections between the ranks, made after every rank reached the master: a
        # peer that closed its end crashed or gave up; the master was reached.
        return UsageError(
            f"rank {ctx.rank}: another rank closed its connection while the {ctx.world_size} "
            f"ranks connected to each other (it crashed or stopped: its own output says why) "
            f"({text.strip().splitlines()[0]})"
        )
    if "connect" in text.lower() or "refused" in text.lower():
        return UsageError(
            f"rank {ctx.rank}: cannot reach the master at {where}: check MASTER_ADDR/MASTER_PORT "
            f"and that rank 0 is running ({text.strip().splitlines()[0]})"
        )
    if "timed out" in text.lower() or "timeout" in text.lower():
        return UsageError(
            f"rank {ctx.rank}: not all {ctx.world_size} ranks joined at {where} within "
            f"{timeout_label}; start every rank, check MASTER_ADDR/MASTER_PORT "
            f"and the network ({text.strip().splitlines()[0]})"
        )
    return error

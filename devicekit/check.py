"""`python -m devicekit check`: prove the wiring with real collectives, and time all_reduce.

Runs under any launcher (each process is one rank) or, started plainly, spawns
`--nproc-per-node` ranks itself. Every rank verifies all_reduce, broadcast, all_gather
and barrier results; rank 0 prints one summary. The exit code is non-zero on every rank
when any rank saw a wrong result.
"""

import argparse
import dataclasses
import json
import os
import socket
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

import devicekit
from devicekit import runtime
from devicekit.distributed import timeout_seconds
from devicekit.environments import (
    LaunchContext,
    LaunchOptions,
    detect,
    launcher_of,
    started_by_launcher,
)
from devicekit.errors import UsageError

EXIT_DISAGREE = 1
WARMUP = 2
# The all_reduce sizes timed run from 1 KiB up to --max-bytes; each rank holds a buffer of
# the largest, so 4 GiB bounds what a mistyped value can ask of the device's memory.
MIN_MESSAGE = 1024
MAX_MESSAGE = 4 << 30


def message_sizes(max_bytes: int) -> list[int]:
    """Message sizes in bytes: 1 KiB, then x4 up to `max_bytes`."""
    sizes: list[int] = []
    size = MIN_MESSAGE
    while size <= max_bytes:
        sizes.append(size)
        size *= 4
    return sizes


def bus_bandwidth(nbytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for an all_reduce, as nccl-tests reports them:
    busbw = algbw * 2 (n - 1) / n, the traffic each link carries in a ring."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (world_size - 1) / world_size


def _verify(ctx: LaunchContext, device: torch.device) -> dict[str, bool]:
    """Run each collective with known inputs; return {name: ok} for this rank."""
    world = ctx.world_size
    results = {}

    tensor = torch.full((1024,), float(ctx.rank + 1), device=device)
    dist.all_reduce(tensor)
    results["all_reduce_sum"] = bool(torch.all(tensor == world * (world + 1) / 2))

    tensor = torch.full((16,), float(ctx.rank), device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    results["all_reduce_max"] = bool(torch.all(tensor == world - 1))

    expected = torch.arange(4096, dtype=torch.float32, device=device) * 3 + 7
    tensor = expected.clone() if ctx.rank == 0 else torch.zeros_like(expected)
    dist.broadcast(tensor, src=0)
    results["broadcast"] = bool(torch.equal(tensor, expected))

    gathered = [torch.zeros(2, device=device) for _ in range(world)]
    dist.all_gather(gathered, torch.tensor([float(ctx.rank), float(ctx.local_rank)], device=device))
    results["all_gather"] = [int(t[0].item()) for t in gathered] == list(range(world))

    dist.barrier()
    results["barrier"] = True
    return results


def _measure(ctx: LaunchContext, device: torch.device, max_bytes: int) -> list[dict[str, float]]:
    """Time all_reduce over a range of sizes; the slowest rank's time counts."""
    rows = []
    for nbytes in message_sizes(max_bytes):
        tensor = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
        iters = max(3, min(50, (64 << 20) // (nbytes * 4) or 1))
        for _ in range(WARMUP):
            dist.all_reduce(tensor)
        devicekit.synchronize()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor)
        devicekit.synchronize()
        elapsed = torch.tensor(
            [(time.perf_counter() - start) / iters], dtype=torch.float32, device=device
        )
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        seconds = float(elapsed.item())
        algbw, busbw = bus_bandwidth(nbytes, seconds, ctx.world_size)
        rows.append(
            {"bytes": nbytes, "time_us": seconds * 1e6, "algbw_gbps": algbw, "busbw_gbps": busbw}
        )
    return rows


def run_rank(ctx: LaunchContext, max_bytes: int = 64 << 20, as_json: bool = False) -> bool:
    """The check as one rank of a joined group. Returns True when every rank saw every
    result right."""
    device = devicekit.device()
    results = _verify(ctx, device)
    mine = {
        "rank": ctx.rank,
        "local_rank": ctx.local_rank,
        "host": socket.gethostname(),
        "device": str(device),
        "ok": all(results.values()),
        "failed": sorted(name for name, ok in results.items() if not ok),
    }
    everyone: list[Any] = [None] * ctx.world_size  # every rank's `mine`, once gathered
    dist.all_gather_object(everyone, mine)
    all_ok = all(entry["ok"] for entry in everyone)
    bandwidth = _measure(ctx, device, max_bytes) if all_ok else []
    if ctx.is_main:
        report = {
            "ok": all_ok,
            "device": devicekit.device_type(),
            "backend": dist.get_backend(),
            "launcher": ctx.mode,
            "world_size": ctx.world_size,
            "nnodes": ctx.nnodes,
            "checks": sorted(results),
            "ranks": everyone,
            "bandwidth": bandwidth,
        }
        print(json.dumps(report, indent=2) if as_json else format_report(report), flush=True)
    return all_ok


def format_report(report: dict[str, Any]) -> str:
    """The human-readable summary rank 0 prints."""
    verdict = "OK" if report["ok"] else "FAILED"
    lines = [
        f"devicekit check: {verdict}: {report['world_size']} ranks on {report['nnodes']} "
        f"node(s), launcher {report['launcher']}, device {report['device']}, backend "
        f"{report['backend']}",
        f"  checked on every rank: {', '.join(report['checks'])}",
    ]
    for entry in report["ranks"]:
        state = "ok" if entry["ok"] else "WRONG: " + ", ".join(entry["failed"])
        lines.append(
            f"  rank {entry['rank']:>3} (local {entry['local_rank']}) {entry['host']} "
            f"{entry['device']}: {state}"
        )
    if report["bandwidth"]:
        lines.append(f"  {'size':>10} {'time (us)':>12} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}")
        for row in report["bandwidth"]:
            lines.append(
                f"  {_human_bytes(row['bytes']):>10} {row['time_us']:>12.1f} "
                f"{row['algbw_gbps']:>13.3f} {row['busbw_gbps']:>13.3f}"
            )
    return "\n".join(lines)


def _human_bytes(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:g} {unit}"
        nbytes /= 1024
    return str(nbytes)


def _rank_main(local_rank: int, args: argparse.Namespace) -> None:
    ctx = devicekit.init_distributed(
        args.dist_backend,
        timeout=args.dist_timeout,
        options=LaunchOptions(local_rank=args.local_rank, cli=True),
    )
    if ctx.world_size < 2:
        raise UsageError(
            "devicekit check needs at least 2 ranks: start it under a launcher with 2 or "
            "more, or pass --nproc-per-node 2 (or more) to let it spawn them"
        )
    if not run_rank(ctx, args.max_bytes, args.json):
        sys.exit(EXIT_DISAGREE)


def _started_by(args: argparse.Namespace) -> str:
    """Which launcher started this process, with the variables that say so."""
    env = detect(LaunchOptions(), os.environ)
    if not started_by_launcher(env):
        return f"a launcher started this one (--local-rank {args.local_rank})"
    shown = ", ".join(
        f"{name}={os.environ[name]}" for name in env.VARIABLES[:2] if name in os.environ
    )
    return f"{env.NAME} started this one ({shown})"


def main(args: argparse.Namespace) -> int:
    """Entry point for `devicekit check` with parsed `args`; returns the exit code."""
    options = LaunchOptions(
        local_rank=args.local_rank,
        nproc_per_node=args.nproc_per_node,
        multiprocessing_distributed=True,
        cli=True,
    )
    runtime.kind(args.device, source="--device")
    timeout_seconds(args.dist_timeout, "--dist-timeout")
    if not MIN_MESSAGE <= args.max_bytes <= MAX_MESSAGE:
        raise UsageError(
            f"--max-bytes {args.max_bytes} is not a message size to time: use "
            f"{MIN_MESSAGE} to {MAX_MESSAGE} ({MAX_MESSAGE >> 30} GiB)"
        )
    if launcher_of() is not None or args.local_rank is not None:
        if args.nproc_per_node is not None:
            raise UsageError(
                "--nproc-per-node is for starting ranks without a launcher; "
                f"{_started_by(args)}: drop --nproc-per-node (the launcher decides how many "
                "ranks a node runs)"
            )
        options = dataclasses.replace(options, multiprocessing_distributed=False)
    elif devicekit.nprocs_per_node(options=options) < 2:
        raise UsageError(
            f"devicekit check needs at least 2 ranks and {devicekit.device_type()} "
            "gives 1 here: pass --nproc-per-node 2 or more"
        )
    devicekit.launch(_rank_main, args=(args,), options=options)
    return 0

"""Sharded training (devicekit.shard, FSDP2) against DDP (devicekit.wrap_ddp): memory on the
npu stand-in's counting allocator, step time on the CPU.

    python benchmarks/sharding.py                       # about 6 minutes on 2 idle cores
    python benchmarks/sharding.py --step-pairs 9 --out /tmp/sharding.json

The model is examples/gpt_pretrain.py's GPT (its width and depth set here), trained as the
example trains it: AdamW, fp32. Each figure comes from real ranks started by
devicekit.launch, one JSON line from each; one table is printed and a JSON file written.

1. memory: each rank's peak of torch.npu.max_memory_allocated() over two training steps of
   a GPT of 50.6 M parameters (width 512, 16 blocks) on the npu stand-in, with one sequence
   of 16 tokens a step, so that parameters, gradients and AdamW's two moments are nearly all
   of it. Sharded / DDP at 2 and at 3 ranks; goals <= 0.55 and <= 0.38 (the ideal is 1/N).
   The allocator counts bytes, so a run gives the same figure every time: one run each.
2. capacity: the deepest GPT of width 128 that trains two steps with each device capped at
   DEVICEKIT_SIMULATE_MEMORY=32MiB, for DDP on 2 ranks and shard on 2 and on 3 (depth
   doubled from 1 until a run runs out of memory, then bisected). Goal: shard on 3 ranks
   trains a model at least 2.5x as deep as DDP.
3. step time on the CPU: sharded / DDP, 2 ranks, width 128, 4 blocks, 8 sequences a rank,
   the median step of steps 5-24 in each run; the runs alternate, the order reversed every
   other pair. The row is the median of the paired ratios with its sign-test interval
   (benchmarks/stats.py). Reported: what the all-gathers and reduce-scatters cost.

Never a timed assertion in a test: these figures are measured here and reported.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from machine import cpu_and_versions
from process import PY, ROOT, environ
from stats import median_interval

EXAMPLES = os.path.join(ROOT, "examples")
RUN_TIMEOUT_S = 600
MEMORY_GOALS = {2: 0.55, 3: 0.38}
CAPACITY, CAPACITY_GOAL = "32MiB", 2.5
STEADY_FROM = 5


# -- a rank (this file started by devicekit.launch with --rank-of) ---------------------------


def rank_main(local_rank, args):
    """Train `args.steps` steps; print this rank's peak memory and step times as JSON."""
    import torch

    import devicekit

    sys.path.insert(0, EXAMPLES)
    from gpt_pretrain import TinyGPT, corpus, get_batch  # type: ignore[import-not-found]

    devicekit.init_distributed()
    rank, world, device = devicekit.rank(), devicekit.world_size(), devicekit.device()
    torch.manual_seed(0)
    model = TinyGPT(dim=args.dim, heads=max(1, args.dim // 64), layers=args.layers)
    if args.strategy == "shard":
        model = devicekit.shard(model, mixed_precision=False)
    else:
        model = devicekit.wrap_ddp(model.to(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data, step_s = corpus(), []
    for step in range(args.steps):
        start = time.perf_counter()
        x, y = get_batch(data, step, 0, rank, world, args.batch, 1)
        model(x.to(device), y.to(device)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        devicekit.synchronize()
        step_s.append(time.perf_counter() - start)
    print(json.dumps({"rank": rank, "peak": devicekit.max_memory_allocated(), "step_s": step_s}))
    devicekit.destroy_process_group()


# -- the driver ------------------------------------------------------------------------------


def ranks(strategy, nproc, dim, layers, steps, batch, npu, capacity=None):
    """Start `nproc` ranks of this file; (exit code, [each rank's JSON], stderr)."""
    env = environ(DEVICEKIT_NPROC_PER_NODE=str(nproc), OMP_NUM_THREADS="1")
    if npu:
        env.update(DEVICEKIT_SIMULATE="npu", DEVICEKIT_DEVICE="npu")
        env["DEVICEKIT_SIMULATE_DEVICES"] = str(max(2, nproc))
    else:
        env["DEVICEKIT_DEVICE"] = "cpu"
    if capacity:
        env["DEVICEKIT_SIMULATE_MEMORY"] = capacity
    cmd = [PY, os.path.abspath(__file__), "--rank-of", strategy, "--dim", str(dim)]
    cmd += ["--layers", str(layers), "--steps", str(steps), "--batch", str(batch)]
    done = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, lines, done.stderr


def finished(strategy, nproc, dim, layers, steps, batch, npu):
    """Each rank's JSON of a run that must succeed."""
    code, lines, stderr = ranks(strategy, nproc, dim, layers, steps, batch, npu)
    if code != 0 or len(lines) != nproc:
        raise RuntimeError(f"{strategy} on {nproc} ranks exited {code}:\n{stderr[-2000:]}")
    return lines


def memory_row(nproc):
    peaks = {
        strategy: max(line["peak"] for line in finished(strategy, nproc, 512, 16, 2, 1, True))
        for strategy in ("ddp", "shard")
    }
    ratio, goal = peaks["shard"] / peaks["ddp"], MEMORY_GOALS[nproc]
    return {
        "what": f"peak npu memory a rank, shard / DDP, GPT 50.6 M parameters, {nproc} ranks",
        "ddp_mib": peaks["ddp"] / 2**20,
        "shard_mib": peaks["shard"] / 2**20,
        "ratio": ratio,
        "goal": f"<= {goal}",
        "verdict": "met" if ratio <= goal else "not met",
    }


def deepest(strategy, nproc):
    """The largest depth that trains under CAPACITY, and every trial (depth: fits)."""
    trials = {}

    def fits(layers):
        code, _, stderr = ranks(strategy, nproc, 128, layers, 2, 2, True, CAPACITY)
        if code not in (0, 2) or (code == 2 and "out of memory" not in stderr):
            raise RuntimeError(f"{strategy}, {layers} blocks: exit {code}\n{stderr[-2000:]}")
        trials[layers] = code == 0
        return code == 0

    low, high = 0, 1
    while fits(high):
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low, trials


def capacity_row():
    found = {
        (strategy, nproc): deepest(strategy, nproc)
        for strategy, nproc in (("ddp", 2), ("shard", 2), ("shard", 3))
    }
    ddp = found["ddp", 2][0]
    ratio = found["shard", 3][0] / ddp if ddp else float("inf")
    return {
        "what": f"deepest GPT (width 128) that trains under {CAPACITY} a device",
        "ddp_2_ranks": ddp,
        "shard_2_ranks": found["shard", 2][0],
        "shard_3_ranks": found["shard", 3][0],
        "ratio": ratio,
        "goal": f">= {CAPACITY_GOAL} (shard on 3 ranks / DDP)",
        "verdict": "met" if ratio >= CAPACITY_GOAL else "not met",
        "trials": {f"{s} {n} ranks": t for (s, n), (_, t) in found.items()},
    }


def step_row(pairs):
    times = {"ddp": [], "shard": []}
    for index in range(pairs):
        order = ("ddp", "shard") if index % 2 == 0 else ("shard", "ddp")
        for strategy in order:
            lines = finished(strategy, 2, 128, 4, STEADY_FROM + 20, 8, False)
            rank0 = next(line for line in lines if line["rank"] == 0)
            times[strategy].append(statistics.median(rank0["step_s"][STEADY_FROM:]))
    ratios = [s / d for s, d in zip(times["shard"], times["ddp"], strict=True)]
    low, high, confidence = median_interval(ratios)
    return {
        "what": "step time shard / DDP on the CPU, 2 ranks, GPT width 128, 4 blocks, batch 8",
        "ddp_ms": 1000 * statistics.median(times["ddp"]),
        "shard_ms": 1000 * statistics.median(times["shard"]),
        "ratio": statistics.median(ratios),
        "interval": [low, high],
        "confidence": confidence,
        "pairs": pairs,
        "verdict": "report",
    }


def format_table(results):
    m, rows = results["machine"], results["rows"]
    lines = [
        f"machine: {m['cpu']} ({m['cpu_family_model']}), {m['cores']} cores, torch "
        f"{m['torch']}, Python {m['python']}; {m['when']}",
        "",
        "| row | DDP | shard | ratio | goal | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for nproc in MEMORY_GOALS:
        row = rows[f"1. memory, {nproc} ranks"]
        lines.append(
            f"| 1. {row['what']} | {row['ddp_mib']:.1f} MiB | {row['shard_mib']:.1f} MiB | "
            f"{row['ratio']:.3f} | {row['goal']} | {row['verdict']} |"
        )
    row = rows["2. capacity"]
    lines.append(
        f"| 2. {row['what']} | {row['ddp_2_ranks']} blocks (2 ranks) | "
        f"{row['shard_2_ranks']} (2 ranks), {row['shard_3_ranks']} (3 ranks) | "
        f"{row['ratio']:.2f} | {row['goal']} | {row['verdict']} |"
    )
    row = rows["3. step time"]
    lines.append(
        f"| 3. {row['what']} | {row['ddp_ms']:.1f} ms | {row['shard_ms']:.1f} ms | "
        f"{row['ratio']:.3f} ({row['interval'][0]:.3f}-{row['interval'][1]:.3f}, "
        f"{row['pairs']} pairs, {row['confidence']:.1%}) | - | report |"
    )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step-pairs", type=int, default=9)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "sharding_results.json"))
    parser.add_argument("--rank-of", choices=("ddp", "shard"), help=argparse.SUPPRESS)
    parser.add_argument("--dim", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--layers", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_of:
        import devicekit

        args.strategy = args.rank_of
        devicekit.launch(rank_main, args=(args,))
        return
    results = {
        "machine": cpu_and_versions()
        | {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
        "rows": {},
    }

    def record(name, row):  # the JSON after every row: a late failure loses nothing
        results["rows"][name] = row
        with open(args.out, "w") as handle:
            json.dump(results, handle, indent=2)

    for nproc in MEMORY_GOALS:
        print(f"1. memory, {nproc} ranks ...", file=sys.stderr, flush=True)
        record(f"1. memory, {nproc} ranks", memory_row(nproc))
    print("2. capacity ...", file=sys.stderr, flush=True)
    record("2. capacity", capacity_row())
    print("3. step time ...", file=sys.stderr, flush=True)
    record("3. step time", step_row(args.step_pairs))
    print(format_table(results))
    print(f"\nJSON: {args.out}")


if __name__ == "__main__":
    main()

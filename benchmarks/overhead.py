"""run.py's group `overhead`, row (a): the layer's own cost, main.py's step against a plain
DDP loop, judged on blocks alternating within the same processes (overhead_blocks.py)."""

import sys

from process import pinned_ranks, run
from rates import (
    STEADY_FROM,
    baseline_args,
    cpu_defaults,
    main_py,
    precision_flags,
    result_json,
    result_of,
    train_args,
)
from stats import interleaved, ratio_row

# Global batch, 32 per rank on 2 ranks. At 64 px and 16 per rank the gradient all-reduce
# (46.8 MB a step, on the rank's one core) took about half of each step, and the runs'
# spread (0.87-1.04) was many times the goal's 2 %.
OVERHEAD = {"size": 128, "batch": 64, "steps": 40}
# Whole runs of one program differ by up to +-8 % here, so the goal is judged on blocks of
# steps alternating within the same processes (benchmarks/overhead_blocks.py): BLOCK_RUNS
# launches of `pairs` pairs each.
BLOCK_RUNS, BLOCK_STEPS = 3, 10


def measure(pairs):
    """(a) The layer's own cost: main.py's step against a plain DDP loop doing the same work
    at the same precision and memory format (main.py's defaults on this CPU) with the same
    DDP settings. 2 ranks, each pinned to its own core; data made in the training process
    (-j 0) on both sides. Judged on alternating blocks within the same processes; whole
    separate runs are the cross-check."""
    amp, channels_last = cpu_defaults()
    main_flags, base_flags, words = precision_flags(amp, channels_last)
    size, batch, steps = OVERHEAD["size"], OVERHEAD["batch"], OVERHEAD["steps"]
    common = baseline_args("resnet18", size, batch, *base_flags)

    def plain_loop():
        prefix, env = pinned_ranks(2, "benchmarks/plain_ddp.py")
        return result_of(run(prefix + [*common, "--workers", "0", "--steps", str(steps)], env=env))

    def main_run():
        prefix, env = pinned_ranks(2)
        return main_py(prefix, env, train_args("resnet18", size, batch, steps, 0, *main_flags))

    blocks = {"plain DDP loop": [], "main.py": []}
    for launch in range(BLOCK_RUNS):
        print(
            f"  alternating blocks, launch {launch + 1}/{BLOCK_RUNS}", file=sys.stderr, flush=True
        )
        prefix, env = pinned_ranks(2, "benchmarks/overhead_blocks.py")
        result = result_json(
            run(
                prefix + [*common, "--pairs", str(pairs), "--block-steps", str(BLOCK_STEPS)],
                env=env,
            )
        )
        for name, seconds in result["block_s"].items():
            blocks[name] += [{"images_per_sec": result["images_per_block"] / s} for s in seconds]
    runs = interleaved({"plain DDP loop": plain_loop, "main.py": main_run}, pairs)
    config = (
        f"resnet18 {size} px, batch {batch // 2} per rank, 2 ranks on 1 core each, "
        f"data in the training process, {words} on both sides"
    )
    rows = {
        "a. layer overhead": ratio_row(
            blocks,
            "plain DDP loop",
            "main.py",
            0.98,
            f"main.py's step (trainer.loop with devicekit's DDP, AMP and loader) / a "
            f"plain-PyTorch DDP loop with the same DDP settings (gradient_as_bucket_view, no "
            f"buffer broadcast), alternating blocks of {BLOCK_STEPS} steps in the same "
            f"processes, {BLOCK_RUNS} launches: {config}",
        ),
        "a. cross-check: whole runs": ratio_row(
            runs,
            "plain DDP loop",
            "main.py",
            None,
            f"main.py / benchmarks/plain_ddp.py as separate runs, median step of steps "
            f"{STEADY_FROM}-{steps - 1}: {config}",
        ),
    }
    return rows, runs | {"blocks": blocks}

"""run.py's group `scaling`, row 3: weak scaling of main.py from 1 rank to 2, its ceiling
without the gradient all-reduce, and where a 2-rank step's time goes."""

import statistics

from process import pinned_ranks
from rates import STEADY_FROM, main_py, train_args
from stats import interleaved, ratio_row

SCALING = {"size": 224, "batch": 32, "steps": 22, "workers": 0}  # batch per rank


def measure(pairs):
    """Weak scaling as users meet it: main.py at the reference's image size with the
    per-rank batch fixed, 1 rank on 1 core against 2 ranks on 1 core each (pinned, one
    compute thread), and main.py with its gradient all-reduce switched off
    (benchmarks/main_variant.py) on the same 2 cores: the ceiling, the same program.
    The data time is read from the printed steps."""
    size, batch, steps, workers = (SCALING[k] for k in ("size", "batch", "steps", "workers"))

    def ranks(nproc, *variant):
        prefix, env = pinned_ranks(nproc, "benchmarks/main_variant.py" if variant else None)
        return main_py(
            prefix, env, [*variant, *train_args("resnet18", size, batch * nproc, steps, workers)]
        )

    runs = interleaved(
        {
            "main.py, 1 rank": lambda: ranks(1),
            "main.py, 2 ranks": lambda: ranks(2),
            "main.py without all-reduce, 2 ranks": lambda: ranks(2, "--bench-no-allreduce"),
        },
        pairs,
    )
    config = (
        f"resnet18 {size} px, batch {batch} per rank, 1 core and 1 compute thread per "
        f"rank, main.py's defaults, data in the training process, median step of steps "
        f"{STEADY_FROM}-{steps - 1}"
    )
    rows = {
        "3. weak scaling": ratio_row(
            runs, "main.py, 1 rank", "main.py, 2 ranks", 1.8, f"main.py 2 ranks / 1 rank: {config}"
        ),
        "3. ceiling: no all-reduce": ratio_row(
            runs,
            "main.py, 1 rank",
            "main.py without all-reduce, 2 ranks",
            None,
            f"main.py with its gradient all-reduce switched off, 2 ranks / main.py 1 rank: "
            f"{config}",
        ),
    }
    return rows | {"3. scaling profile": scaling_profile(runs, batch)}, runs


def scaling_profile(runs, batch):
    """Where a 2-rank step's time goes, in ms (medians over the rounds): data loading,
    compute (the 1-rank step less its data), 'other' (what running two ranks side by side
    costs without any collective: shared caches and memory, the host), and the all-reduce
    (what the collective adds to the step: its CPU time on the rank's core and waits)."""

    def step_ms(name, world):
        return statistics.median(batch * world / r["images_per_sec"] for r in runs[name]) * 1e3

    one = step_ms("main.py, 1 rank", 1)
    two = step_ms("main.py, 2 ranks", 2)
    ceiling = step_ms("main.py without all-reduce, 2 ranks", 2)
    data = statistics.median(r["data_s"] for r in runs["main.py, 2 ranks"]) * 1e3
    data_one = statistics.median(r["data_s"] for r in runs["main.py, 1 rank"]) * 1e3
    return {
        "what": "ms per step of the 2-rank run (rank 0), medians over the rounds",
        "step_ms": two,
        "data_ms": data,
        "compute_ms": one - data_one,
        "other_ms": ceiling - one + data_one - data,
        "allreduce_ms": two - ceiling,
        "one_rank_step_ms": one,
        "no_allreduce_step_ms": ceiling,
    }

"""Benchmarks of main.py and devicekit: one table with honest intervals, and a JSON file.

    python benchmarks/run.py                      # every group (about an hour on 2 cores)
    python benchmarks/run.py --only scaling       # groups: overhead, devices, scaling,
                                                  # startup, collectives, compile, gpu
    python benchmarks/run.py --only overhead --pairs 15 --out /tmp/overhead.json

Method. A run's figure is its steady state: images per step over the median wall time of
its steps from the 10th on (rank 0's, its data loading included; main.py prints every
step, the baselines report theirs), so that start-up and the odd step slowed by another
tenant of the machine do not decide a ratio. A group runs its programs in interleaved
rounds, the order reversed every other round (A B, B A, A B, ... or A B C, C B A, ...), 9
rounds unless --pairs says otherwise. Each row is a ratio of two of those programs: one
ratio per round (its two runs were made side by side), and the row reports the MEDIAN of
the paired ratios with an interval for it that holds whatever the noise's shape (the
sign-test interval): the k-th smallest and k-th largest ratio, k as large as keeps the
confidence at 95 % or more: for 7 pairs the min-max (98.4 %), for 9 the 2nd smallest to
the 2nd largest (96.1 %), for 15 the 4th (96.5 %). Row (a) asks about 2 %, and whole runs
here differ by up to +-8 % from one to the next, so its pairs are blocks of steps
alternating within the same processes (benchmarks/overhead_blocks.py, 3 launches of --pairs
pairs); whole runs are its cross-check. Verdict: "met" when the whole interval is at or
above the goal, "not met" when the whole interval is below it, "inconclusive" otherwise
("too few pairs" under 95 %). Groups run on the first two cores this process may use, so
that figures compare across machines. `compile` (about 15 minutes) runs only when named;
`gpu` only where a CUDA device is present.

Each group is a module of its own (overhead.py, devices.py, scaling.py, startup.py,
collectives.py, compiled.py, gpu.py), on process.py (running the programs), rates.py (a
run's figure) and stats.py (rounds, rows, verdicts); this file holds the command line, the
machine's description and the table.
"""

import argparse
import json
import os
import sys
import time

import collectives
import compiled
import devices
import gpu
import overhead
import scaling
import startup
from machine import cpu_and_versions
from process import ROOT
from rates import cpu_defaults, precision_flags

sys.path.insert(0, ROOT)  # devicekit from this checkout (startup.py's free port)

# The groups by the name --only takes, each a module whose measure(pairs) returns
# (rows, runs).
GROUPS = {
    "overhead": overhead,
    "devices": devices,
    "scaling": scaling,
    "startup": startup,
    "collectives": collectives,
    "compile": compiled,
    "gpu": gpu,
}
DEFAULT_GROUPS = ("overhead", "devices", "scaling", "startup", "collectives", "gpu")


# -- the machine and the table -----------------------------------------------------------


def machine():
    """What the figures were measured on."""
    import torch

    amp, channels_last = cpu_defaults()
    return cpu_and_versions() | {
        "main_py_cpu_defaults": precision_flags(amp, channels_last)[2],
        "accelerator": str(torch.accelerator.current_accelerator()),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average_at_start": os.getloadavg()[0],
    }


def describe_machine(m):
    flags = ", ".join(
        f"{flag} {'yes' if present else 'no'}" for flag, present in m["flags"].items()
    )
    return (
        f"machine: {m['cpu']}, {m['cores']} cores ({flags}); torch {m['torch']} "
        f"({m['torch_cpu_capability']}), Python {m['python']}; main.py's CPU defaults here: "
        f"{m['main_py_cpu_defaults']}; accelerator {m['accelerator']}; {m['when']}, "
        f"1-minute load average at start {m['load_average_at_start']:.2f}"
    )


def format_table(results):
    lines = [describe_machine(results["machine"])]
    rows = {
        name: row
        for name, row in results["rows"].items()
        if isinstance(row, dict) and "verdict" in row
    }  # the other tables follow
    if rows:
        lines += [
            "",
            "Ratio: median of the paired ratios; interval: the sign-test interval for "
            "that median (distribution-free; its confidence in brackets).",
            "",
            "| row | baseline img/s | devicekit img/s | ratio (median) | interval "
            "| goal | verdict |",
            "|---|---|---|---|---|---|---|",
        ]
    for name, row in rows.items():
        if "baseline_runs" in row:
            lines.append(
                f"| {name}: {row['what']} | {row['baseline_img_s']:.1f} | "
                f"{row['candidate_img_s']:.1f} | {row['ratio']:.3f} | {row['interval'][0]:.3f}-"
                f"{row['interval'][1]:.3f} ({row['pairs']} pairs, {row['confidence']:.1%}) | "
                f"{row['goal'] or '-'} | {row['verdict']} |"
            )
        else:
            lines.append(
                f"| {name}: {row['what']} | - | - | {row.get('ratio', '-')} | - | - | "
                f"{row['verdict']} |"
            )
    profile = results["rows"].get("3. scaling profile")
    if profile:
        lines += [
            "",
            "| scaling profile, ms per 2-rank step | step | data | compute | other "
            "(2 ranks side by side) | all-reduce |",
            "|---|---|---|---|---|---|",
            f"| main.py, 2 ranks on 1 core each | {profile['step_ms']:.0f} | "
            f"{profile['data_ms']:.0f} | {profile['compute_ms']:.0f} | "
            f"{profile['other_ms']:.0f} | {profile['allreduce_ms']:.0f} |",
        ]
    launchers = results["rows"].get("start-up")
    if launchers:
        lines += [
            "",
            "| start-up, 2 ranks: command to first step | median s | min-max s |",
            "|---|---|---|",
        ]
        lines += [
            f"| {name} | {r['median_s']:.1f} | {r['interval'][0]:.1f}-{r['interval'][1]:.1f} |"
            for name, r in launchers.items()
        ]
    bandwidth = results["rows"].get("collectives (gloo)")
    if bandwidth:
        lines += ["", "| gloo all_reduce, 2 ranks, bytes | busbw GB/s |", "|---|---|"]
        lines += [f"| {r['bytes']} | {r['busbw_gbps']:.3f} |" for r in bandwidth]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=9, help="interleaved rounds per group")
    parser.add_argument(
        "--only", default=None, help=f"comma-separated groups, of: {', '.join(GROUPS)}"
    )
    parser.add_argument(
        "--out",
        default=None,
        help="JSON file (default: benchmarks/results.json for a full run; none for --only)",
    )
    args = parser.parse_args()
    names = DEFAULT_GROUPS if args.only is None else args.only.split(",")
    unknown = [name for name in names if name not in GROUPS]
    if unknown or args.pairs < 1:
        parser.error(
            f"unknown group(s) {unknown}; choose from {list(GROUPS)}"
            if unknown
            else "--pairs must be at least 1"
        )
    out = args.out or (
        os.path.join(ROOT, "benchmarks", "results.json") if args.only is None else None
    )
    results = {"machine": machine(), "rows": {}, "runs": {}, "seconds": {}}
    print(describe_machine(results["machine"]), file=sys.stderr, flush=True)
    for name in names:
        print(
            f"running {name} (load average {os.getloadavg()[0]:.2f}) ...",
            file=sys.stderr,
            flush=True,
        )
        started = time.perf_counter()
        rows, runs = GROUPS[name].measure(args.pairs)
        results["rows"].update(rows)
        results["runs"][name] = runs
        results["seconds"][name] = time.perf_counter() - started
        results.setdefault("measured_utc", {})[name] = time.strftime(
            "%Y-%m-%d %H:%M", time.gmtime()
        )
        print(json.dumps(rows, default=str)[:2000], file=sys.stderr, flush=True)
        if out:  # after every group: a late failure loses nothing
            with open(out, "w") as handle:
                json.dump(results, handle, indent=2)
    print(format_table(results))
    if out:
        print(f"\nJSON: {out}")


if __name__ == "__main__":
    main()

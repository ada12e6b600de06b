"""The statistics every benchmark here reports: the sign-test interval for a median, blocks
alternating in one process, and run.py's interleaved rounds with their rows and verdicts."""

import math
import statistics
import sys
import time

CONFIDENCE = 0.95


def median_interval(values):
    """(low, high, confidence): the sign-test interval for the median of `values`, the k-th
    smallest and k-th largest value with k as large as keeps the confidence >= CONFIDENCE
    (k = 1, the min-max, when even that falls short)."""
    ordered, n = sorted(values), len(values)

    def confidence(k):  # P(k-th smallest <= median <= k-th largest) = 1 - 2 P(Bin(n, 1/2) < k)
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n

    k = 1
    while k < (n + 1) // 2 and confidence(k + 1) >= CONFIDENCE:
        k += 1
    return ordered[k - 1], ordered[n - k], confidence(k)


def alternate_blocks(numerator, denominator, pairs, block_steps, warmup):
    """Time two sides of a comparison in the same process: `numerator(n)` and
    `denominator(n)` each run n steps and return a block's figure (seconds a step). After
    `warmup` steps of each, `pairs` pairs of blocks of `block_steps`, the order reversed
    every other pair. Returns (numerator figures, denominator figures, paired ratios)."""
    numerator(warmup)
    denominator(warmup)
    top, bottom = [], []
    for index in range(pairs):
        order = ((numerator, top), (denominator, bottom))
        for side, figures in order if index % 2 == 0 else order[::-1]:
            figures.append(side(block_steps))
    return top, bottom, [t / b for t, b in zip(top, bottom, strict=False)]


def step_timer(step, batches):
    """A block for alternate_blocks: `block(n)` runs `step(*batch)` n times, cycling through
    `batches` where the last block left off, and returns the median seconds of a step."""
    done = [0]

    def block(count):
        times = []
        for _ in range(count):
            batch = batches[done[0] % len(batches)]
            start = time.perf_counter()
            step(*batch)
            times.append(time.perf_counter() - start)
            done[0] += 1
        return statistics.median(times)

    return block


def interleaved(programs, pairs):
    """Run each program once per round, in order on even rounds and reversed on odd ones;
    returns {name: [result, ...]}."""
    names = list(programs)
    runs = {name: [] for name in names}
    for round_index in range(pairs):
        for name in names if round_index % 2 == 0 else names[::-1]:
            print(f"  round {round_index + 1}/{pairs}: {name}", file=sys.stderr, flush=True)
            runs[name].append(programs[name]())
    return runs


def verdict(low, high, confidence, goal):
    """'met', 'not met' or 'inconclusive' for a goal ratio `goal` (None: reported only);
    'too few pairs' when the interval's confidence is below CONFIDENCE."""
    if goal is None:
        return "report"
    if confidence < CONFIDENCE:
        return "too few pairs"
    if low >= goal:
        return "met"
    if high < goal:
        return "not met"
    return "inconclusive"


def ratio_row(runs, baseline, candidate, goal, what):
    """A row: the paired ratios candidate / baseline, their median and its interval."""
    base = [r["images_per_sec"] for r in runs[baseline]]
    cand = [r["images_per_sec"] for r in runs[candidate]]
    ratios = [c / b for b, c in zip(base, cand, strict=False)]
    low, high, confidence = median_interval(ratios)
    return {
        "what": what,
        "baseline": baseline,
        "candidate": candidate,
        "baseline_img_s": statistics.median(base),
        "candidate_img_s": statistics.median(cand),
        "ratio": statistics.median(ratios),
        "interval": [low, high],
        "confidence": confidence,
        "pairs": len(ratios),
        "goal": None if goal is None else f">= {goal}",
        "verdict": verdict(low, high, confidence, goal),
        "baseline_runs": base,
        "candidate_runs": cand,
        "ratios": ratios,
    }

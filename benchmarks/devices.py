"""run.py's group `devices`, rows (b) and (c): what main.py's per-device defaults add, and
main.py against the reference example's step, one process on two cores."""

from process import one_process, run
from rates import (
    STEADY_FROM,
    baseline_args,
    cpu_defaults,
    main_py,
    precision_flags,
    result_of,
    train_args,
)
from stats import interleaved, ratio_row

# No goal for (c): on a CPU the host is the device, so the reference's per-step host reads
# cost nothing there; what it measures is the step at equal precision, reported as it is.
DEVICES = {"size": 224, "batch": 32, "steps": 20, "workers": 2}


def measure(pairs):
    """(b) what main.py's per-device defaults add: main.py with them / main.py in fp32 NCHW;
    (c) main.py / the reference example's step at main.py's precision and memory format.
    One process on two cores, 2 loader workers each side."""
    amp, channels_last = cpu_defaults()
    _main_flags, base_flags, words = precision_flags(amp, channels_last)
    size, batch, steps, workers = (DEVICES[k] for k in ("size", "batch", "steps", "workers"))
    config = (
        f"resnet18 {size} px, batch {batch}, 1 process on 2 cores, {workers} loader "
        f"workers, median step of steps {STEADY_FROM}-{steps - 1}"
    )

    def main_run(*flags):
        prefix, env = one_process()
        return main_py(
            prefix, env, ["main.py", *train_args("resnet18", size, batch, steps, workers, *flags)]
        )

    def reference():
        prefix, env = one_process()
        return result_of(
            run(
                prefix
                + [
                    "benchmarks/reference_loop.py",
                    *baseline_args(
                        "resnet18", size, batch, "--workers", str(workers), "--steps", str(steps)
                    ),
                    *base_flags,
                ],
                env=env,
            )
        )

    programs = {
        f"reference-style loop, {words}": reference,
        f"main.py defaults ({words})": lambda: main_run(),
    }
    if amp or channels_last:
        programs["main.py fp32 NCHW"] = lambda: main_run("--no-amp", "--no-channels-last")
    runs = interleaved(programs, pairs)
    rows = {}
    if amp or channels_last:
        rows["b. per-device defaults"] = ratio_row(
            runs,
            "main.py fp32 NCHW",
            f"main.py defaults ({words})",
            None,
            f"main.py with this CPU's defaults ({words}) / main.py --no-amp --no-channels-last: "
            f"{config}",
        )
    else:
        rows["b. per-device defaults"] = {
            "what": "this CPU has no native bf16: main.py's defaults are fp32 NCHW, so this "
            "row is 1.00 by construction and was not run",
            "ratio": 1.0,
            "interval": [1.0, 1.0],
            "verdict": "report",
        }
    rows["c. vs reference step"] = ratio_row(
        runs,
        f"reference-style loop, {words}",
        f"main.py defaults ({words})",
        None,
        f"main.py / the reference example's step (per-step loss.item() and accuracy to the "
        f"host, float host images) at the same precision ({words}): {config}",
    )
    return rows, runs

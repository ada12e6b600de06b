"""run.py's group `compile` (run only when named): main.py --compile against main.py eager."""

from devices import DEVICES
from process import one_process
from rates import STEADY_FROM, main_py, train_args
from stats import interleaved, ratio_row


def measure(pairs):
    """main.py --compile / main.py eager (opt-in: about 40 s of compilation per run)."""
    size, batch, workers = DEVICES["size"], DEVICES["batch"], DEVICES["workers"]

    def main_run(*flags):
        prefix, env = one_process()
        return main_py(
            prefix, env, ["main.py", *train_args("resnet18", size, batch, 20, workers, *flags)]
        )

    runs = interleaved(
        {"main.py eager": main_run, "main.py --compile": lambda: main_run("--compile")}, pairs
    )
    return {
        "--compile": ratio_row(
            runs,
            "main.py eager",
            "main.py --compile",
            None,
            f"main.py --compile / eager, resnet18 {size} px, batch {batch}, "
            f"1 process on 2 cores, median step of steps "
            f"{STEADY_FROM}-19",
        )
    }, runs

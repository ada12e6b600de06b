"""Real training runs of main.py: the tiny run's arguments, starting main.py under each
launcher (support.launchers) to its end, and reading what a run leaves behind (its
checkpoint, metrics.jsonl).

Every child gets an explicit environment (support.launchers.child_env: one OpenMP thread,
cpu forced, no launcher variables from the test's own environment) and runs under
support.processes: its own session, output to files, a timeout on every wait, nothing left
running afterwards.
"""

import json
from pathlib import Path

import torch  # before trainer (and so devicekit): see conftest

from support.launchers import MAIN, start
from support.processes import Processes, describe
from trainer import state

NPROC = 2
RUN_TIMEOUT_S = 300  # one tiny 2-rank run takes ~10 s on 2 cores


def tiny_args(
    *,
    dummy=True,
    classes=10,
    batch=16,
    epochs=2,
    steps=3,
    val_steps=2,
    workers=0,
    print_freq=100,
):
    """main.py's arguments for a tiny run: tinynet on 32x32 images, `batch` the node's
    total; a keyword given as None leaves its flag out (main.py's default then)."""
    flags = {
        "--num-classes": classes,
        "-b": batch,
        "--epochs": epochs,
        "--steps-per-epoch": steps,
        "--val-steps": val_steps,
        "-j": workers,
        "-p": print_freq,
    }
    args = ["--dummy"] if dummy else []
    args += ["-a", "tinynet", "--image-size", "32"]
    for flag, value in flags.items():
        if value is not None:
            args += [flag, str(value)]
    return args


# 2 epochs of 3 steps of 16 dummy images, 2 validation steps per epoch, no loader workers.
TINY = tiny_args()
# The ways main.py is started with NPROC ranks (support.launchers names them).
LAUNCHERS = ["torchrun", "launch", "spawn", "run_8p", "ascend"]
CHECKPOINT_KEYS = {"epoch", "step", "arch", "state_dict", "best_acc1", "optimizer", "scheduler"}


def main_py(*args):
    """`python main.py ARGS`, started plainly."""
    return MAIN.argv(*args)


def succeeded(results):
    """`results`, once every process exited 0 without a traceback."""
    for result in results:
        assert result.returncode == 0, describe(results)
        assert "Traceback" not in result.stderr, describe(results)
    return results


def run_training(launcher, args, directory, nproc=NPROC, timeout=RUN_TIMEOUT_S, **env):
    """Run main.py with `args` started the way `launcher` does, with `nproc` ranks and the
    variables `env` set; return the Finished of every process the test started (rank 0's
    output first). Rank logs (run_8p.sh) go to `directory`/logs."""
    directory = Path(directory)
    with Processes(directory / "processes") as procs:
        started = start(procs, launcher, MAIN, args, nproc, directory, **env)
        results = procs.finish_all(started, timeout)
    return succeeded(results)


def read_metrics(output_dir):
    with open(Path(output_dir) / state.METRICS, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_checkpoint(output_dir, name=state.CHECKPOINT):
    return torch.load(Path(output_dir) / name, map_location="cpu", weights_only=True)


def _bits(tensor):
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


def assert_bitwise_equal(left, right, where="checkpoint"):
    """Nested dicts/lists/tuples equal, tensors bit for bit (dtype and shape included)."""
    if isinstance(left, torch.Tensor):
        assert isinstance(right, torch.Tensor), where
        assert left.dtype == right.dtype and left.shape == right.shape, where
        assert torch.equal(_bits(left), _bits(right)), (
            f"{where} differs (max abs diff "
            f"{(left.double() - right.double()).abs().max().item():.3g})"
        )
    elif isinstance(left, dict):
        assert isinstance(right, dict) and set(left) == set(right), (
            where,
            sorted(map(str, left)),
            sorted(map(str, right)),
        )
        for key in left:
            assert_bitwise_equal(left[key], right[key], f"{where}[{key!r}]")
    elif isinstance(left, (list, tuple)):
        assert isinstance(right, (list, tuple)) and len(left) == len(right), where
        for index, (a, b) in enumerate(zip(left, right, strict=False)):
            assert_bitwise_equal(a, b, f"{where}[{index}]")
    else:
        assert left == right, f"{where}: {left!r} != {right!r}"

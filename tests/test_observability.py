"""main.py --tensorboard and --profile-steps: what a run leaves for TensorBoard and the
trace viewers (from rank 0 alone), their bad input (one line, exit code 2, nothing
written), and that a run without them loads no tensorboard and starts no profiler."""

import glob
import json
import math
import os
import re
import sys
from unittest import mock

import pytest
from PIL import Image

from conftest import ROOT, clean_environ
from support.main_in_process import run_main_until_launch
from support.runs import TINY, read_metrics, run_training, tiny_args
from support.script_groups import run_group
from trainer import state

TIMEOUT_S = 300  # the runs of in_one_process, one after another
MAIN = os.path.join(ROOT, "main.py")
EPOCHS, STEPS, LR = 2, 3, 0.1  # TINY's epochs and --steps-per-epoch, and the default --lr
STEP_TAGS = {"train/loss", "train/acc1", "train/lr"}
EPOCH_TAGS = {
    "val/loss": "val_loss",
    "val/acc1": "acc1",
    "val/acc5": "acc5",
    "train/images_per_sec": "images_per_sec",
}  # tag: its metrics.jsonl field
# Runs main.main and prints which tensorboard modules it loaded and how many autograd
# (Kineto) profilers it started: torch.profiler starts its recordings through them.
PROBE = """\
import json, sys
from torch.autograd import profiler
started = []
original = profiler.profile.__init__
def counted(self, *args, **kwargs):
    started.append(1)
    original(self, *args, **kwargs)
profiler.profile.__init__ = counted
import main
main.main(sys.argv[1:])
print(json.dumps({"tensorboard": sorted(m for m in sys.modules if "tensorboard" in m),
                  "profilers": len(started)}))
"""


def read_events(folder):
    """{scalar tag: [(step, value)]} and the config text of a TensorBoard run folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    scalars = {
        tag: [(event.step, event.value) for event in events.Scalars(tag)]
        for tag in events.Tags()["scalars"]
    }
    config = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    return scalars, config


def describe_folder(folder):
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else f"{folder} is missing"


# -- what a run leaves --------------------------------------------------------------------


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    """One 2-rank run (spawn) with --tensorboard and --profile-steps 2, -p 1 and the cosine
    schedule: its folder (out/, board/) and the Finished of its processes. Sharded, with
    the defaults of a CPU with bf16 instructions on any CPU (DEVICEKIT_CPU_BF16=1: bf16
    autocast and channels_last), which the rest of the suite meets only on such a CPU."""
    folder = tmp_path_factory.mktemp("observed")
    args = TINY + ["-p", "1", "--lr-schedule", "cosine", "--output-dir", folder / "out"]
    args += ["--tensorboard", folder / "board", "--profile-steps", 2, "--shard"]
    return folder, run_training("spawn", args, folder, DEVICEKIT_CPU_BF16=1)


@pytest.mark.slow
def test_tensorboard_two_epoch_run_records_steps_epochs_and_config(observed):
    folder, _ = observed
    out, board = folder / "out", folder / "board"
    assert len(list(board.glob("events.out.tfevents.*"))) == 1, describe_folder(board)  # rank 0
    scalars, config = read_events(board)
    assert STEP_TAGS | set(EPOCH_TAGS) <= set(scalars), sorted(scalars)
    # -p 1: every step of both epochs, on one step axis.
    for tag in STEP_TAGS:
        assert [step for step, _ in scalars[tag]] == list(range(EPOCHS * STEPS)), scalars[tag]
    assert all(math.isfinite(value) and value > 0 for _, value in scalars["train/loss"])
    assert all(0 <= value <= 100 for _, value in scalars["train/acc1"])
    # Each step's rate is the cosine schedule's at that step, starting at --lr.
    assert scalars["train/lr"][0] == (0, pytest.approx(LR))
    assert scalars["train/lr"] == [
        (step, pytest.approx(LR * state.lr_factor(step / STEPS, EPOCHS, 0, "cosine")))
        for step in range(EPOCHS * STEPS)
    ]
    # Epoch scalars sit at the step that ends their epoch, with metrics.jsonl's values.
    rows = read_metrics(out)
    for tag, field in EPOCH_TAGS.items():
        assert scalars[tag] == [
            ((row["epoch"] + 1) * STEPS, pytest.approx(row[field], rel=1e-6)) for row in rows
        ], tag
    assert "arch: 'tinynet'" in config and "lr_schedule: 'cosine'" in config, config


@pytest.mark.slow
def test_a_bf16_cpus_defaults_train_sharded_on_any_cpu(observed):
    """main.py with no precision or memory-format flag under DEVICEKIT_CPU_BF16=1 takes
    the policy of a CPU with bf16 instructions, and trains sharded with it to the same
    weights on both ranks (FSDP2 refused the channels_last weights before shard() made
    them contiguous)."""
    _, results = observed
    text = results[0].stdout
    assert ", AMP bfloat16, channels_last," in text.splitlines()[0], text
    done = re.findall(r"^=> rank (\d)/2 done: weights (\w+)$", text, re.M)
    assert sorted(rank for rank, _ in done) == ["0", "1"], text
    assert len({weights for _, weights in done}) == 1, text


@pytest.mark.slow
def test_profile_steps_leaves_one_trace_of_the_steps_after_warm_up(observed):
    folder, results = observed
    out = folder / "out"
    said = re.findall(r"^=> profiled 2 steps: trace in (.+)$", results[0].stdout, re.M)
    assert said == [str(out / "profile")], results[0].stdout
    traces = glob.glob(os.path.join(said[0], "*.pt.trace.json"))
    assert len(traces) == 1, describe_folder(said[0])  # rank 0 alone profiles
    with open(traces[0], encoding="utf-8") as handle:
        events = json.load(handle)["traceEvents"]
    # Step 0 waited, step 1 warmed up, steps 2 and 3 were recorded.
    steps = {event["name"] for event in events if event.get("name", "").startswith("ProfilerStep#")}
    assert steps == {"ProfilerStep#2", "ProfilerStep#3"}, steps


# A run's arguments without --tensorboard and --profile-steps, and with them.
FLAGS = {"plain": [], "asked": ["--tensorboard", "{d}/board", "--profile-steps", "1"]}


@pytest.fixture(scope="module")
def in_one_process(tmp_path_factory):
    """One process (support/run_scripts.py) running, one after another as `python SCRIPT`
    would: PROBE with a run's arguments without --tensorboard and --profile-steps, PROBE
    with them, then the bad inputs that only a rank can refuse (PROCESS_CASES)."""
    folder = tmp_path_factory.mktemp("in_one_process")
    probe = folder / "probe.py"
    probe.write_text(PROBE)
    entries = []
    for name, flags in FLAGS.items():
        d = folder / name
        argv = TINY + ["--epochs", "1", "--output-dir", d / "out"]
        entries.append((name, probe, argv + [flag.format(d=d) for flag in flags]))
    for case_id in PROCESS_CASES:
        d = folder / case_id
        d.mkdir()
        make_files(d)
        argv, _ = BAD[case_id]
        entries.append((case_id, MAIN, [a.format(d=d) for a in argv] + ["--output-dir", d / "out"]))
    env = clean_environ(DEVICEKIT_DEVICE="cpu", OMP_NUM_THREADS=1)
    return run_group(folder, "python", entries, TIMEOUT_S, environ=env)


@pytest.mark.parametrize("name, loaded", [("plain", False), ("asked", True)])
def test_tensorboard_and_profiler_are_loaded_only_when_asked(in_one_process, name, loaded):
    """The run without the flags goes first in its process: nothing before it loaded
    tensorboard or started a profiler."""
    result = in_one_process.result(name)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert bool(seen["tensorboard"]) is loaded, seen
    assert bool(seen["profilers"]) is loaded, seen
    assert not loaded or "torch.utils.tensorboard" in seen["tensorboard"], seen
    assert os.path.isdir(in_one_process.folder / name / "out" / "profile") is loaded


# -- bad input ----------------------------------------------------------------------------

# 8 images in batches of 8, 2 epochs: 2 training steps, which only a rank can count.
EIGHT_IMAGES = [
    *tiny_args(dummy=False, classes=2, batch=8, steps=None, val_steps=None, print_freq=None),
    "{d}/images",
]
BAD = {  # id: (command line, the error line; {d}: the test's folder)
    "profile-steps-zero": (TINY + ["--profile-steps", "0"], "--profile-steps 0 must be at least 1"),
    "profile-steps-more-than-the-run": (
        TINY + ["--profile-steps", "5"],  # 2 epochs x 3 steps: 1 short
        "--profile-steps 5 needs 7 training steps (1 to wait, 1 to warm up, 5 to profile), "
        "but this run trains at most 6: lower --profile-steps or raise --epochs",
    ),
    "profile-steps-more-than-the-data": (
        EIGHT_IMAGES + ["--profile-steps", "1"],
        "--profile-steps 1 needs 3 training steps (1 to wait, 1 to warm up, 1 to profile), "
        "but this run trains at most 2: lower --profile-steps or raise --epochs",
    ),
    "profile-steps-with-evaluate": (
        TINY + ["--profile-steps", "1", "--evaluate"],
        "--profile-steps records training, and --evaluate trains nothing: drop one of them",
    ),
    "tensorboard-under-a-file": (
        TINY + ["--tensorboard", "{d}/a_file/board"],
        "--tensorboard '{d}/a_file/board' cannot be made: '{d}/a_file' exists and is not a "
        "folder: choose another --tensorboard",
    ),
    "tensorboard-with-evaluate": (
        TINY + ["--tensorboard", "{d}/board", "--evaluate"],
        "--tensorboard records training, and --evaluate trains nothing: drop one of them",
    ),
    "tensorboard-not-installed": (
        TINY + ["--tensorboard", "{d}/board"],
        "--tensorboard needs the tensorboard package, which is not installed: "
        "pip install 'devicekit[tensorboard]'",
    ),
}


def make_files(d):
    """d/a_file, and d/images: an ImageFolder tree of 2 classes x 4 images per split."""
    (d / "a_file").write_text("")
    for split in ("train", "val"):
        for index, name in enumerate("ab"):
            os.makedirs(d / "images" / split / name)
            for n in range(4):
                Image.new("RGB", (40, 36), (99 * index, 7 * n, 50)).save(
                    d / "images" / split / name / f"{n}.png"
                )


# Refused in the rank (only a rank counts the batches a data folder gives): run as `python
# main.py` in in_one_process. The others are refused before main.py launches any rank, and
# run in this process (support/main_in_process.py).
PROCESS_CASES = ["profile-steps-more-than-the-data"]


def assert_refused(result, expected, d):
    """Exit code 2, `expected` the one line on stderr, nothing written in `d`."""
    code, stderr = result
    assert code == 2, stderr
    assert stderr.splitlines() == [f"error: {expected.format(d=d)}"], stderr
    assert sorted(os.listdir(d)) == ["a_file", "images"]  # no out/, no board/


@pytest.mark.parametrize("case_id", [case for case in BAD if case not in PROCESS_CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, case_id):
    argv, expected = BAD[case_id]
    make_files(tmp_path)
    argv = [arg.format(d=tmp_path) for arg in argv] + ["--output-dir", str(tmp_path / "out")]
    # tensorboard-not-installed: hidden as on a machine without the package (its import
    # fails, importlib finds no spec)
    hidden = {"tensorboard": None} if case_id == "tensorboard-not-installed" else {}
    with mock.patch.dict(sys.modules, hidden):
        code, stderr, launch = run_main_until_launch(argv, tmp_path, {"DEVICEKIT_DEVICE": "cpu"})
    assert launch is None, f"{case_id} reached devicekit.launch: only a rank refuses it"
    assert_refused((code, stderr), expected, tmp_path)


@pytest.mark.parametrize("case_id", PROCESS_CASES)
def test_bad_input_a_rank_refuses_is_one_line_exit_2_and_writes_nothing(in_one_process, case_id):
    result = in_one_process.result(case_id)
    d = in_one_process.folder / case_id
    assert_refused((result.returncode, result.stderr), BAD[case_id][1], d)

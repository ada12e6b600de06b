"""Real training runs of main.py (gloo on loopback), and the pieces they rely on.

Slow tests start main.py the ways people do -- torchrun, torch.distributed.launch,
--multiprocessing-distributed, launch/run_8p.sh and Ascend's RANK_ID/RANK_SIZE idiom -- and
check what the runs leave behind: the same weights under every launcher, one process with
batch B agreeing with two processes with B/2 each (no batch norm), every validation sample
counted exactly once whatever the world size, a resumed run equal to an uninterrupted one,
and the README's demo reaching >= 90 % top-1.

Every child gets an explicit environment (one OpenMP thread, cpu forced, no launcher
variables from the test's own environment) and runs under tests/support/processes.py: its
own session, output to files, a timeout on every wait, nothing left running afterwards.
tests/support/runs.py starts main.py under each launcher and reads what a run leaves.

Fast tests cover the learning-rate schedule, the exact validation shard and the
per-sample augmentation seeding.
"""

import itertools
import math
import os
import random
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import devicekit
import models
from devicekit.environments import find_free_port
from support.launchers import child_env
from support.paths import REPO
from support.processes import Processes, describe
from support.runs import (
    CHECKPOINT_KEYS,
    LAUNCHERS,
    NPROC,
    RUN_TIMEOUT_S,
    TINY,
    assert_bitwise_equal,
    load_checkpoint,
    read_metrics,
    run_training,
    tiny_args,
)
from trainer import image_folder, state, transforms
from trainer.demo_data import make_demo_dataset, read_marker
from trainer.loaders import EpochSeededDataset, ShardSampler

DEMO_TIMEOUT_S = 600  # the demo recipe takes ~2.5 min on 2 cores

# The LaunchContext.mode rank 0 prints for each way of starting.
EXPECTED_MODE = {
    "torchrun": "torchrun",
    "launch": "launch",
    "spawn": "spawn",
    "run_8p": "env",
    "ascend": "ascend",
    "env": "env",
    "single": "single",
}
# metrics.jsonl fields that depend only on the computation (not on the clock).
DETERMINISTIC_METRICS = (
    "epoch",
    "train_loss",
    "train_acc1",
    "val_loss",
    "acc1",
    "acc5",
    "val_samples",
    "lr",
    "world_size",
)


def assert_started_as(stdout, launcher, world_size):
    mode = EXPECTED_MODE[launcher]
    assert re.search(rf"^=> \S+ on cpu \({mode}: rank 0/{world_size},", stdout, re.M), stdout


def printed_accuracies(stdout):
    """The (Acc@1, Acc@5) strings of every ` * Acc@1 X Acc@5 Y` line, in order."""
    return re.findall(r"^ \* Acc@1 (\S+) Acc@5 (\S+)$", stdout, re.M)


def progress_lines(stdout):
    """The training/validation progress lines (rank 0's job alone) in `stdout`."""
    return re.findall(r"^(?:Epoch: \[|Test: \[| \* Acc@1 |=> \S+ on ).*$", stdout, re.M)


def deterministic(rows):
    return [{key: row[key] for key in DETERMINISTIC_METRICS} for row in rows]


def initial_state_dict(arch, num_classes, seed=0):
    """The weights rank 0 of a run starts from (main.train: seed_everything, then create),
    made here without touching this process's random state."""
    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            devicekit.seed_everything(seed, 0)
            model = models.create(arch, num_classes=num_classes)
            return {key: value.detach().clone() for key, value in model.state_dict().items()}
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


# -- 1. the same weights under every launcher ---------------------------------------------


def given_port(launcher):
    """The variables that give run_8p.sh its master port: finding a free one itself costs a
    Python that imports torch, and the README's demo run (below) covers that path."""
    return {"MASTER_PORT": find_free_port()} if launcher == "run_8p" else {}


@pytest.fixture(scope="module")
def launcher_runs(tmp_path_factory):
    """Each launcher's 2-rank TINY run, made once per module: (results, output dir)."""
    cache = {}

    def get(name):
        if name not in cache:
            directory = tmp_path_factory.mktemp(name)
            output = directory / "out"
            args = [*TINY, "--output-dir", output]
            results = run_training(name, args, directory, **given_port(name))
            cache[name] = (results, output)
        return cache[name]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_training_runs_under_launcher(launcher, launcher_runs):
    results, output = launcher_runs(launcher)
    stdout = results[0].stdout
    assert_started_as(stdout, launcher, NPROC)
    # A user's first screen is devicekit's own line, not a warning; the one exception is
    # torch.distributed.launch announcing its own deprecation, which is torch's to print.
    warnings = [
        line
        for r in results
        for line in (r.stderr + r.stdout).splitlines()
        if "Warning" in line
        and not (launcher == "launch" and "torch.distributed.launch is deprecated" in line)
    ]
    assert not warnings, describe(results)
    assert stdout.startswith("=> "), stdout
    assert "batch 8 per process" in stdout, stdout  # -b 16 is the node's total
    assert len(printed_accuracies(stdout)) == 2, stdout  # one validation per epoch, rank 0 only
    if launcher == "ascend":
        assert not progress_lines(results[1].stdout), "only rank 0 reports progress"
    if launcher == "run_8p":
        assert (output.parent / "logs" / "rank_0.log").read_text() == stdout
        rank1 = (output.parent / "logs" / "rank_1.log").read_text()
        assert not progress_lines(rank1), "only rank 0 reports progress"

    checkpoint = load_checkpoint(output)
    assert set(checkpoint) == CHECKPOINT_KEYS
    assert type(checkpoint["epoch"]) is int and checkpoint["epoch"] == 2
    assert checkpoint["arch"] == "tinynet"
    assert type(checkpoint["best_acc1"]) is float
    assert not any(key.startswith("module.") for key in checkpoint["state_dict"])
    assert set(checkpoint["state_dict"]) == set(initial_state_dict("tinynet", 10))
    assert (output / state.BEST).is_file()

    rows = read_metrics(output)
    assert [row["epoch"] for row in rows] == [0, 1]
    for row, (acc1, _) in zip(rows, printed_accuracies(stdout), strict=False):
        assert row["world_size"] == NPROC
        assert row["val_samples"] == 2 * 8 * NPROC  # --val-steps 2 of 8 per rank
        assert f"{row['acc1']:.3f}" == acc1
    assert checkpoint["best_acc1"] == max(row["acc1"] for row in rows)


@pytest.mark.slow
def test_every_launcher_trains_the_same_weights(launcher_runs):
    _reference_results, reference_output = launcher_runs(LAUNCHERS[0])
    reference = load_checkpoint(reference_output)
    reference_rows = read_metrics(reference_output)
    initial = initial_state_dict("tinynet", 10)
    assert any(not torch.equal(reference["state_dict"][key], initial[key]) for key in initial), (
        "the reference run did not train"
    )
    for launcher in LAUNCHERS[1:]:
        _, output = launcher_runs(launcher)
        checkpoint = load_checkpoint(output)
        assert_bitwise_equal(
            checkpoint["state_dict"], reference["state_dict"], f"{launcher} state_dict"
        )
        assert checkpoint["best_acc1"] == reference["best_acc1"], launcher
        rows = read_metrics(output)
        assert [(r["acc1"], r["val_samples"]) for r in rows] == [
            (r["acc1"], r["val_samples"]) for r in reference_rows
        ], launcher
        assert deterministic(rows) == deterministic(reference_rows), launcher


# -- 2./3. one short epoch on 1 and 2 ranks of the demo's shapes -------------------------

SHAPES_CLASSES, SHAPES_VAL_PER_CLASS, SHAPES_TRAIN_PER_CLASS = 5, 5, 4
SHAPES_VAL = SHAPES_CLASSES * SHAPES_VAL_PER_CLASS  # 25: divisible by neither 2 nor 3
# -b 6 divides over 1, 2 and 3 ranks (6, 3, 2 per process): the shards are uneven and
# end in partial batches (25 = 4*6+1 on 1 rank; 13+12 on 2; 9+8+8 on 3). fp32 (--no-amp),
# as the reference accuracy computed here is.
SHAPES_ARGS = [
    *tiny_args(
        dummy=False, classes=SHAPES_CLASSES, batch=6, epochs=None, steps=None, val_steps=None
    ),
    "--no-amp",
]
# The world sizes of the shapes runs and the launcher of each (any launcher trains the same
# weights: test_every_launcher_trains_the_same_weights); Ascend's per-rank loop starts no
# launcher process of its own. Not 3 ranks as well: a third rank's shard is one more
# uneven shard counted into the same all_reduce, and the shard arithmetic of 1 to 4 ranks
# is test_shard_sampler_covers_every_index_once's; the shard (resnet18) and --evaluate
# runs below split the 25 images over 2 ranks again.
WORLDS = {1: "single", 2: "ascend"}
# No batch norm: a rank's batch statistics would differ from those of the whole batch, and
# the world sizes could not end with the same weights (test_two_ranks_match_one_rank_...).
SHAPES_ARCH = "tinynet_nobn"


def shapes_dataset(tmp_path):
    """The demo's shapes as an ImageFolder in `tmp_path`, 25 validation images; its root."""
    return make_demo_dataset(
        tmp_path / "shapes",
        num_classes=SHAPES_CLASSES,
        train_per_class=SHAPES_TRAIN_PER_CLASS,
        val_per_class=SHAPES_VAL_PER_CLASS,
        image_size=32,
    )


def expected_accuracy(checkpoint_path, val_dir, arch="tinynet"):
    """Acc@1 and Acc@5 of the checkpoint over every val image, computed here in one pass."""
    model = models.create(arch, num_classes=SHAPES_CLASSES)
    model.load_state_dict(
        torch.load(checkpoint_path, map_location="cpu", weights_only=True)["state_dict"]
    )
    model.eval()
    val = image_folder.ImageFolder(val_dir, transforms.val_transform(32))
    assert len(val) == SHAPES_VAL
    images = torch.stack([val[i][0] for i in range(len(val))])
    targets = torch.tensor([val[i][1] for i in range(len(val))])
    with torch.no_grad():
        top = model(transforms.normalize(images)).topk(5, dim=1).indices
    hits = top.eq(targets.unsqueeze(1))
    return (
        100.0 * hits[:, :1].any(dim=1).sum().item() / len(val),
        100.0 * hits.any(dim=1).sum().item() / len(val),
    )


@pytest.fixture(scope="module")
def shapes_runs(tmp_path_factory):
    """(dataset root, {world size: (results, output dir)}): one epoch of 2 steps of
    SHAPES_ARCH on the shapes with 1 and 2 ranks (WORLDS), made once per module."""
    root = tmp_path_factory.mktemp("shapes")
    shapes = shapes_dataset(root)
    runs = {}
    for world, launcher in WORLDS.items():
        output = root / f"train{world}" / "out"
        args = [shapes, *SHAPES_ARGS, "-a", SHAPES_ARCH, "--epochs", "1", "--steps-per-epoch"]
        args += ["2", "--output-dir", output]
        runs[world] = (run_training(launcher, args, output.parent, nproc=world), output)
    return shapes, runs


@pytest.mark.slow
def test_two_ranks_match_one_rank_without_batch_norm(shapes_runs):
    """The shapes runs without batch norm: 2 ranks with B/2 each end with the weights of 1
    rank with batch B, up to float rounding, after training that moved every tensor by far
    more."""
    _, runs = shapes_runs
    (single, single_out), (pair, pair_out) = runs[1], runs[2]
    assert_started_as(single[0].stdout, "single", 1)
    assert "batch 6 per process" in single[0].stdout
    assert_started_as(pair[0].stdout, "ascend", 2)
    assert "batch 3 per process" in pair[0].stdout

    one = load_checkpoint(single_out)["state_dict"]
    two = load_checkpoint(pair_out)["state_dict"]
    initial = initial_state_dict(SHAPES_ARCH, SHAPES_CLASSES)
    assert set(one) == set(two) == set(initial)
    # Not bitwise: the 2-rank gradient is (sum over 3 + sum over 3) / 2 summed by gloo's
    # all-reduce, the 1-rank one a single reduction over 6; float addition is not
    # associative, so the last bits differ (and 2 momentum steps carry them along).
    for key in initial:
        torch.testing.assert_close(two[key], one[key], rtol=1e-4, atol=1e-5, msg=key)
    # ... and the runs did train: every tensor moved, by far more than the runs differ.
    moved = max((one[key] - initial[key]).abs().max().item() for key in initial)
    apart = max((one[key] - two[key]).abs().max().item() for key in initial)
    for key in initial:
        assert not torch.equal(one[key], initial[key]), f"1 rank: {key} never changed"
        assert not torch.equal(two[key], initial[key]), f"2 ranks: {key} never changed"
    assert moved > 1e-3 and apart < moved * 1e-3, (moved, apart)
    assert read_metrics(single_out)[0]["world_size"] == 1
    assert read_metrics(pair_out)[0]["world_size"] == 2


@pytest.mark.slow
def test_validation_counts_every_sample_once_for_any_world_size(shapes_runs):
    """The shapes runs on 1 and 2 ranks: metrics.jsonl counts all 25 validation samples,
    and the accuracy each run printed is the one a single pass over all 25 images here
    gives its checkpoint (which holds the weights it validated), so no sample was dropped
    or counted twice by any world size's split. (--evaluate of a checkpoint on another
    number of ranks: test_evaluate_under_torchrun_exits_cleanly_every_time.)"""
    shapes, runs = shapes_runs
    for world, launcher in WORLDS.items():
        results, output = runs[world]
        assert_started_as(results[0].stdout, launcher, world)
        (row,) = read_metrics(output)
        assert row["val_samples"] == SHAPES_VAL, (world, row)
        assert row["world_size"] == world
        hits = row["acc1"] * SHAPES_VAL / 100
        assert abs(hits - round(hits)) < 1e-6, row  # a whole number of the 25 samples
        acc1, acc5 = expected_accuracy(output / state.CHECKPOINT, Path(shapes) / "val", SHAPES_ARCH)
        assert printed_accuracies(results[0].stdout) == [(f"{acc1:.3f}", f"{acc5:.3f}")], (
            world,
            results[0].stdout,
        )
        assert (row["acc1"], row["acc5"]) == pytest.approx((acc1, acc5)), (world, row)


@pytest.mark.slow
def test_evaluate_under_torchrun_exits_cleanly_every_time(shapes_runs, tmp_path):
    """--evaluate ends right after its last all_reduce. gloo's worker threads outlive the
    process group (torch keeps it alive once DDP was built) and used to be caught still
    releasing that collective's tensors while the interpreter shut down: SIGABRT
    ("terminate called without an active exception") in ~1 of 4-10 runs that had succeeded.

    Four runs (8 ranks shutting down) one after another, each evaluating the 1-rank shapes
    checkpoint on 2 ranks (25 images split 13/12) and printing the accuracy a single pass
    here gives it. The race cannot be provoked on purpose from outside (it is a thread
    still running when the interpreter ends), so the guard is statistical: 4 runs all pass
    with a chance of 0.75**4 = 32 % at 1 failure in 4 runs, 0.9**4 = 66 % at 1 in 10, and
    every run of the suite draws again (two suite runs at 1 in 4: 0.75**8 = 10 %). Eight
    runs per suite run cost 12 more processes that import torch for that margin. What a
    run costs is torchrun's and the ranks' start-up (import torch, and torch._dynamo, which
    DDP's constructor imports), which no argument shortens. They run one after another:
    side by side, or as one run of more ranks, they would share the same 2 cores (beside
    the other test worker) and change the shutdown timing under test. No other run of the
    suite stands in for one of them: the other torchrun runs of main.py train, and
    training ends after a barrier, not an all_reduce."""
    shapes, runs = shapes_runs
    checkpoint = runs[1][1] / state.CHECKPOINT
    acc1, acc5 = expected_accuracy(checkpoint, Path(shapes) / "val", SHAPES_ARCH)
    args = [shapes, *SHAPES_ARGS, "-a", SHAPES_ARCH, "--evaluate", "--resume", checkpoint]
    for attempt in range(4):
        results = run_training("torchrun", args, tmp_path / f"run{attempt}")
        text = results[0].stdout
        assert_started_as(text, "torchrun", 2)
        assert printed_accuracies(text) == [(f"{acc1:.3f}", f"{acc5:.3f}")], (attempt, text)


@pytest.mark.slow
def test_shard_trains_validates_unevenly_split_ranks_and_resumes_from_one_plain_file(tmp_path):
    """main.py --shard on 2 ranks, resnet18 (its 8 blocks sharded each on its own):
    validation of 25 images split 13/12 (5 batches on one rank, 4 on the other; without
    devicekit.unsharded each forward gathers every block from both ranks, and the run
    fails) counts each once; the checkpoint is one plain file, a full state_dict and a full
    optimizer state, that a plain model loads; --shard resumes from it under another
    launcher (a shell loop's RANK/WORLD_SIZE, then Ascend's RANK_ID/RANK_SIZE). In
    channels_last, as the defaults are on a GPU and on a CPU with bf16: FSDP2 takes
    contiguous parameters only, and shard() gives it NCHW weights (the images stay
    channels_last)."""
    shapes = shapes_dataset(tmp_path)
    output = tmp_path / "out"
    common = [shapes, *SHAPES_ARGS, "-a", "resnet18", "--shard", "--channels-last"]
    common += ["--steps-per-epoch", "2"]
    common += ["--output-dir", output]
    first = run_training("env", [*common, "--epochs", "1"], tmp_path / "first", 2)
    assert_started_as(first[0].stdout, "env", 2)
    (row,) = read_metrics(output)
    assert row["val_samples"] == SHAPES_VAL and row["world_size"] == 2, row
    saved = load_checkpoint(output)
    assert set(saved) == CHECKPOINT_KEYS, set(saved)
    acc1, acc5 = expected_accuracy(output / state.CHECKPOINT, Path(shapes) / "val", "resnet18")
    assert printed_accuracies(first[0].stdout) == [(f"{acc1:.3f}", f"{acc5:.3f}")]
    parameters = list(models.create("resnet18", SHAPES_CLASSES).parameters())
    assert sorted(saved["optimizer"]["state"]) == list(range(len(parameters)))
    for index, parameter in enumerate(parameters):
        assert saved["optimizer"]["state"][index]["momentum_buffer"].shape == parameter.shape

    resume = ["--epochs", "2", "--resume", output / state.CHECKPOINT]
    second = run_training("ascend", [*common, *resume], tmp_path / "second", 2)
    text = second[0].stdout
    assert re.search(r"^=> resumed .* at epoch 1, step 0$", text, re.M), text
    assert "Epoch: [0]" not in text and "Epoch: [1]" in text, text
    assert load_checkpoint(output)["epoch"] == 2
    assert [row["epoch"] for row in read_metrics(output)] == [0, 1]


# -- 4. resuming is exact -----------------------------------------------------------------


@pytest.mark.slow
def test_resumed_run_equals_uninterrupted_run(tmp_path, launcher_runs):
    """Epoch 0 as a shell loop starts the ranks, epoch 1 resumed under Ascend's RANK_ID loop,
    equal bit for bit to the uninterrupted 2-epoch torchrun run of the launcher tests (any
    launcher trains the same weights)."""
    _, straight = launcher_runs("torchrun")
    output = tmp_path / "out"
    first = run_training(
        "env", [*TINY, "--epochs", "1", "--output-dir", output], tmp_path / "first"
    )
    assert load_checkpoint(output)["epoch"] == 1
    leftover = output / f".{state.CHECKPOINT}.k1lled.tmp"  # of a write killed midway
    leftover.write_bytes(b"PK\x03\x04 half a checkpoint")
    second = run_training(
        "ascend",
        [*TINY, "--epochs", "2", "--output-dir", output, "--resume", output / state.CHECKPOINT],
        tmp_path / "second",
    )
    assert len(printed_accuracies(first[0].stdout)) == 1
    assert re.search(r"^=> resumed .* at epoch 1, step 0$", second[0].stdout, re.M), second[
        0
    ].stdout
    assert "Epoch: [0]" not in second[0].stdout and "Epoch: [1]" in second[0].stdout

    resumed, reference = load_checkpoint(output), load_checkpoint(straight)
    assert resumed["epoch"] == reference["epoch"] == 2
    assert_bitwise_equal(resumed["state_dict"], reference["state_dict"], "state_dict")
    momentum = {
        index: entry["momentum_buffer"] for index, entry in resumed["optimizer"]["state"].items()
    }
    assert len(momentum) == len(list(models.create("tinynet", 10).parameters()))
    assert all(buffer is not None for buffer in momentum.values())
    assert_bitwise_equal(resumed["optimizer"], reference["optimizer"], "optimizer")
    assert_bitwise_equal(resumed["scheduler"], reference["scheduler"], "scheduler")
    assert resumed["best_acc1"] == reference["best_acc1"]
    assert not leftover.exists()
    # The resumed run appended epoch 1 to the first run's epoch 0.
    assert deterministic(read_metrics(output)) == deterministic(read_metrics(straight))


# -- 5. the README's demo -----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.demo
def test_demo_recipe_reaches_90_percent(tmp_path):
    """`bash launch/run_8p.sh` with no arguments, as the README says: it writes the demo
    data to the repository's data/demo (once) and the run to output/demo (both git-ignored),
    appending to output/demo/metrics.jsonl."""
    metrics = REPO / "output" / "demo" / state.METRICS
    before = len(read_metrics(metrics.parent)) if metrics.exists() else 0
    with Processes(tmp_path) as procs:
        proc = procs.start(
            "demo",
            ["bash", "launch/run_8p.sh"],
            child_env(LOG_DIR=tmp_path / "logs", PYTHON=sys.executable),
        )
        (result,) = procs.finish_all([proc], DEMO_TIMEOUT_S)
    assert result.returncode == 0, describe([result])
    assert "Traceback" not in result.stderr, describe([result])
    assert_started_as(result.stdout, "run_8p", NPROC)
    made = read_marker(REPO / "data" / "demo")
    rows = read_metrics(metrics.parent)[before:]
    assert [row["epoch"] for row in rows] == list(range(24)), rows
    assert all(row["world_size"] == NPROC for row in rows)
    assert all(row["val_samples"] == made["num_classes"] * made["val_per_class"] for row in rows)
    assert rows[-1]["acc1"] >= 90.0, rows[-1]


# -- run_8p.sh's core binding -------------------------------------------------------------

# Stands in for the interpreter run_8p.sh starts ranks with: for main.py it prints the cores
# and thread count the rank would train with; anything else goes to the real interpreter.
_RANK_PROBE = """#!/bin/sh
if [ "${{1##*/}}" = main.py ]; then
    exec "{python}" -c 'import os; print("cores", *sorted(os.sched_getaffinity(0)), \
"omp", os.environ.get("OMP_NUM_THREADS"))'
fi
exec "{python}" "$@"
"""


def _bound_ranks(tmp_path, nproc, script_cores, **extra):
    tmp_path.mkdir()
    probe = tmp_path / "python"
    probe.write_text(_RANK_PROBE.format(python=sys.executable))
    probe.chmod(0o755)
    with Processes(tmp_path) as procs:
        proc = procs.start(
            "run_8p",
            ["taskset", "-c", script_cores, "bash", "launch/run_8p.sh", "--dummy"],
            child_env(
                BIND_CORES=1,
                NPROC_PER_NODE=nproc,
                PYTHON=probe,
                LOG_DIR=tmp_path / "logs",
                **given_port("run_8p"),
                **extra,
            ),
        )
        (result,) = procs.finish_all([proc], RUN_TIMEOUT_S)
    assert result.returncode == 0, describe([result])
    return [(tmp_path / "logs" / f"rank_{i}.log").read_text().split() for i in range(nproc)]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_bind_cores_gives_each_rank_its_own_cores_and_as_many_threads(tmp_path):
    cores = sorted(os.sched_getaffinity(0))[:2]
    both = ",".join(map(str, cores))
    # The environment's OMP_NUM_THREADS=1 (child_env) is the user's choice and is kept.
    assert _bound_ranks(tmp_path / "a", 2, both) == [
        ["cores", str(cores[0]), "omp", "1"],
        ["cores", str(cores[1]), "omp", "1"],
    ]
    # Unset, each rank gets one thread per core of its share.
    unset = {"OMP_NUM_THREADS": ""}
    assert _bound_ranks(tmp_path / "b", 1, both, **unset) == [
        ["cores", str(cores[0]), str(cores[1]), "omp", "2"]
    ]
    # Started on the second core only, the rank gets that core (not core 0).
    assert _bound_ranks(tmp_path / "c", 1, str(cores[1]), **unset) == [
        ["cores", str(cores[1]), "omp", "1"]
    ]


# -- fast: the learning-rate schedule ------------------------------------------------------


def test_warmup_is_linear():
    factors = [state.lr_factor(epoch, 90, 5, "step") for epoch in (0, 1, 2, 3, 4)]
    assert factors[0] == pytest.approx(1e-3 / 5)
    steps = [b - a for a, b in itertools.pairwise(factors)]
    assert steps == pytest.approx([0.2] * 4)
    assert state.lr_factor(2.5, 90, 5, "step") == pytest.approx((2.5 + 1e-3) / 5)
    assert state.lr_factor(4.5, 90, 5, "step") == pytest.approx((4.5 + 1e-3) / 5)
    assert state.lr_factor(5, 90, 5, "step") == 1.0
    assert state.lr_factor(5, 90, 5, "cosine") == 1.0  # warmup hands over to cosine at 1


def test_step_schedule_divides_by_ten_every_30_epochs():
    assert state.lr_factor(0, 90, 0, "step") == 1.0
    assert state.lr_factor(29.999, 90, 0, "step") == 1.0
    assert state.lr_factor(30, 90, 0, "step") == pytest.approx(0.1)
    assert state.lr_factor(59.5, 90, 0, "step") == pytest.approx(0.1)
    assert state.lr_factor(60, 90, 0, "step") == pytest.approx(0.01)
    assert state.lr_factor(89.99, 90, 0, "step") == pytest.approx(0.01)


def test_cosine_schedule_reaches_zero_at_the_end():
    assert state.lr_factor(0, 10, 0, "cosine") == 1.0
    assert state.lr_factor(5, 10, 0, "cosine") == pytest.approx(0.5)
    assert state.lr_factor(10, 10, 0, "cosine") == pytest.approx(0.0, abs=1e-12)
    assert state.lr_factor(9.99, 10, 0, "cosine") < 1e-4
    curve = [state.lr_factor(epoch / 10, 10, 2, "cosine") for epoch in range(20, 101)]
    assert all(b < a for a, b in itertools.pairwise(curve))
    assert curve[-1] == pytest.approx(0.0, abs=1e-12)


def test_scheduler_follows_lr_factor_every_step():
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=0.4)
    scheduler = state.make_scheduler(optimizer, 3, 1, "cosine", steps_per_epoch=4)
    for step in range(12):
        expected = 0.4 * state.lr_factor(step / 4, 3, 1, "cosine")
        assert optimizer.param_groups[0]["lr"] == pytest.approx(expected), step
        optimizer.step()
        scheduler.step()


# -- fast: the exact validation shard -----------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_shard_sampler_covers_every_index_once(world):
    for length in range(11):
        shards = [list(ShardSampler(length, world, rank)) for rank in range(world)]
        together = [index for shard in shards for index in shard]
        assert sorted(together) == list(range(length)), (length, shards)
        assert len(set(together)) == len(together)
        assert [len(ShardSampler(length, world, rank)) for rank in range(world)] == list(
            map(len, shards)
        )
        assert max(map(len, shards)) - min(map(len, shards)) <= 1
        assert [len(shard) for shard in shards] == [
            math.ceil((length - rank) / world) for rank in range(world)
        ]


# -- fast: per-sample augmentation seeding -------------------------------------------------


class _Pictures(torch.utils.data.Dataset):
    """A few in-memory RGB pictures through the training transform."""

    def __init__(self, count=4, size=(48, 40)):
        rng = np.random.default_rng(7)
        self.images = [
            Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
            for _ in range(count)
        ]
        self.transform = transforms.train_transform(32)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return self.transform(self.images[index]), index


class _Boxes(torch.utils.data.Dataset):
    """The crop box and flip draw RandomResizedCrop/RandomHorizontalFlip would make."""

    def __len__(self):
        return 4

    def __getitem__(self, index):
        return transforms.RandomResizedCrop(32).box(48, 40), torch.rand(1).item()


def test_epoch_seeded_dataset_is_the_same_in_any_call_order():
    keys = [(epoch, index) for epoch in (0, 1, 2) for index in range(4)]
    forward = EpochSeededDataset(_Pictures(), seed=3)
    first = {key: forward[key][0] for key in keys}
    backward = EpochSeededDataset(_Pictures(), seed=3)
    torch.manual_seed(12345)  # the global RNG state must not matter
    for key in reversed(keys):
        torch.rand(7)  # nor anything drawn between samples
        assert torch.equal(backward[key][0], first[key]), key
    assert torch.equal(forward[(1, 2)][0], first[(1, 2)])  # asked again: still the same
    for key in keys:
        assert first[key].dtype == torch.uint8 and first[key].shape == (3, 32, 32)


def test_epoch_seeded_dataset_leaves_the_global_rng_alone():
    dataset = EpochSeededDataset(_Pictures(), seed=0)
    before = torch.get_rng_state()
    dataset[(0, 1)]
    assert torch.equal(torch.get_rng_state(), before)


def test_another_epoch_gives_another_crop():
    boxes = EpochSeededDataset(_Boxes(), seed=0)
    pictures = EpochSeededDataset(_Pictures(), seed=0)
    for index in range(4):
        assert boxes[(0, index)] != boxes[(1, index)], index
        assert not torch.equal(pictures[(0, index)][0], pictures[(1, index)][0]), index
    # ... as do another sample and another seed.
    assert boxes[(0, 0)] != boxes[(0, 1)]
    assert boxes[(0, 0)] != EpochSeededDataset(_Boxes(), seed=1)[(0, 0)]


@pytest.mark.parametrize("seed", [2_000_000, 20240101, 2**64 - 1, -2_000_000])
def test_epoch_seeded_dataset_takes_large_seeds(seed):
    """(seed, epoch, index) once overflowed torch.manual_seed's 64 bits for --seed >= ~1.8e6."""
    dataset = EpochSeededDataset(_Boxes(), seed=seed)
    assert dataset[(5, 3)] == dataset[(5, 3)]
    assert dataset[(5, 3)] != dataset[(6, 3)]


def test_a_rank_says_it_is_done_in_one_write(monkeypatch):
    """Ranks that finish together share one stdout. print() writes the text and its newline
    apart (two system calls when Python runs unbuffered, as PYTHONUNBUFFERED=1 makes it in
    containers and in these tests), and another rank's line could then land in between,
    gluing two `=> rank R/W done` lines into one."""
    import main

    writes = []

    class Recorder:
        def write(self, text):
            writes.append(text)
            return len(text)

        def flush(self):
            pass

    monkeypatch.setattr(sys, "stdout", Recorder())
    context = devicekit.LaunchContext(
        mode="env",
        rank=1,
        local_rank=1,
        world_size=2,
        local_world_size=2,
        node_rank=0,
        nnodes=1,
        master_addr="127.0.0.1",
        master_port=29500,
        device_index=1,
    )
    main.finish(context, torch.nn.Linear(2, 2))
    assert len(writes) == 1, writes
    assert re.fullmatch(r"=> rank 1/2 done: weights [0-9a-f]+\n", writes[0]), writes

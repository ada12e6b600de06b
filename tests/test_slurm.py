"""Slurm for real: a cluster of munged, slurmctld and two slurmd on this machine
(support/slurm.py), and through it srun, sbatch, `scontrol requeue` and scancel.

One module-scoped run starts everything at once (the 2-core machine runs them side by side)
and the tests read what it left:

- torchrun's 2-rank runs of main.py and of the flat-API example, the references
  (support/torchrun_references.py: made once a session, test_mpi_deepspeed.py reads them too);
- `srun -N1 -n2` of the flat-API example, and `srun -N2 --ntasks-per-node=1` of main.py
  (two Slurm nodes in multiple-slurmd mode: their names do not resolve, so MASTER_ADDR is
  given, as docs/launching.md says);
- docs/launching.md's train_per_node.sbatch (one task per node, launch/run_8p.sh in it) and
  train.sbatch (one task per device, `--requeue`, `--resume auto`) as sbatch jobs;
- train.sbatch paused mid-epoch (rank 0 waits at step PAUSE_AT, tests/fault_injection)
  three times: once requeued, once `scancel --signal=USR1`, once plain `scancel`;
- two mistakes: python started by the batch script without srun, and `devicekit check
  --nproc-per-node 4` in 2 tasks of srun.

Every process of a job carries its group's marker (support/tracked.py), so "every rank
stopped" is read from /proc, wherever slurmd started it.
"""

import contextlib
import re
import time

import pytest

from devicekit.processes import STOP_GRACE_S
from support import torchrun_references as references
from support.launchers import PY
from support.paths import REPO
from support.run_groups import Group
from support.runs import TINY, assert_bitwise_equal, load_checkpoint
from support.slurm import SlurmCluster
from support.tracked import GONE_BOUND_S, poll_until
from trainer import state

pytestmark = pytest.mark.slow

DOCS = REPO / "docs" / "launching.md"
DONE = re.compile(r"^rank (\d+)/(\d+) done: weights ([0-9a-f]{16})$", re.M)
SAVE_EVERY = 2
# Rank 0 waits at the 3rd step of epoch 1 (TINY: 3 steps an epoch), after --save-every 2 saved
# the epoch's first two: a checkpoint at (epoch 1, step 2) to resume from mid-epoch.
PAUSE_AT = 6
RUN_TIMEOUT_S = 300
ONE_TASK_PER_DEVICE = ["--nodes=1", "--ntasks-per-node=2"]
SIGNALLED = ("requeue", "usr1", "term")


def docs_script(name):
    """The sbatch script `name` as docs/launching.md writes it (its heredoc)."""
    match = re.search(
        rf"cat > {re.escape(name)} <<'SCRIPT'\n(.*?\n)SCRIPT\n", DOCS.read_text(), re.S
    )
    assert match, f"docs/launching.md writes no {name}"
    return match.group(1)


@pytest.fixture(scope="module")
def cluster():
    with SlurmCluster.started() as running:
        yield running


def _start_all(cluster, root, stack):
    groups = {name: Group(stack, root / name) for name in ("runs", "bad", *SIGNALLED)}
    runs = groups["runs"]
    train, per_node = root / "train.sbatch", root / "train_per_node.sbatch"
    train.write_text(docs_script("train.sbatch"))
    per_node.write_text(docs_script("train_per_node.sbatch"))
    srun = ["srun", "--kill-on-bad-exit=1"]
    example = [PY, references.EXAMPLE, *references.EXAMPLE_ARGS, "--out", runs.folder / "s.pt"]
    runs.start("srun_example", [*srun, "-N1", "-n2", *example], cluster.env(runs.tracked.env()))
    runs.start(
        "two_nodes",
        [*srun, "-N2", "--ntasks-per-node=1", PY, "main.py", *TINY]
        + ["-b", 8, "--output-dir", runs.folder / "two_nodes"],  # -b is per node: 8 x 2
        cluster.env(runs.tracked.env(MASTER_ADDR="127.0.0.1")),
    )
    runs.jobs["per_node"] = cluster.sbatch(
        ["--nodes=1", f"--output={runs.folder}/per_node.out"],
        per_node,
        [*TINY, "--output-dir", runs.folder / "per_node"],
        cluster.env(runs.tracked.env(NPROC_PER_NODE=2, LOG_DIR=runs.folder / "logs", PYTHON=PY)),
        REPO,
    )
    for name in SIGNALLED:
        group = groups[name]
        fault = {"kind": "pause", "rank": 0, "at_step": PAUSE_AT, "stamp": group.folder / "stamp"}
        if name == "requeue":
            fault["once"] = 1  # the rerun goes through
        group.jobs[name] = cluster.sbatch(
            [*ONE_TASK_PER_DEVICE, f"--output={group.folder}/{name}.out"],
            train,
            [*TINY, "--output-dir", group.folder / "out", "--save-every", SAVE_EVERY],
            cluster.env(group.tracked.env(fault)),
            REPO,
        )

    bad = groups["bad"]
    batch_only = root / "batch_only.sbatch"
    batch_only.write_text(f"#!/bin/bash\n{PY} main.py {' '.join(TINY)}\n")
    bad.jobs["batch_only"] = cluster.sbatch(
        [*ONE_TASK_PER_DEVICE, f"--output={bad.folder}/batch_only.out"],
        batch_only,
        [],
        cluster.env(bad.tracked.env()),
        REPO,
    )
    bad.start(
        "nproc",
        ["srun", "-N1", "-n2", PY, "-m", "devicekit", "check", "--nproc-per-node", "4"],
        cluster.env(bad.tracked.env()),
    )
    return groups


def _stop_paused_jobs(cluster, groups):
    """Requeue one paused job and scancel the other two; when each job's last process
    ended, in seconds after its signal."""
    for name in SIGNALLED:
        stamp = groups[name].folder / "stamp"
        poll_until(stamp.exists, RUN_TIMEOUT_S, f"the {name} job reaching step {PAUSE_AT}")
    signalled = {}
    cluster.requeue(groups["requeue"].jobs["requeue"], RUN_TIMEOUT_S)
    signalled["usr1"] = time.monotonic()
    cluster.run(["scancel", "--signal=USR1", groups["usr1"].jobs["usr1"]])
    signalled["term"] = time.monotonic()
    cluster.run(["scancel", groups["term"].jobs["term"]])
    gone = {}
    for name, at in signalled.items():
        poll_until(
            lambda name=name: not groups[name].tracked.alive(),
            GONE_BOUND_S,
            f"every process of the {name} job gone",
            lambda name=name: str(groups[name].tracked.alive()),
        )
        gone[name] = time.monotonic() - at
    return gone


@pytest.fixture(scope="module")
def slurm_runs(cluster, torchrun_references, tmp_path_factory):
    """Everything the tests read: {"out": {name: Finished}, "jobs": {name: scontrol's
    fields}, "folders": {group: folder}, "gone": {usr1/term: seconds}}; torchrun's runs
    (the references) ended too."""
    root = tmp_path_factory.mktemp("slurm")
    with contextlib.ExitStack() as stack:
        groups = _start_all(cluster, root, stack)
        gone = _stop_paused_jobs(cluster, groups)
        out, jobs = {}, {}
        for group in groups.values():
            for name in group.started:
                out[name] = group.tracked.wait(name, RUN_TIMEOUT_S)[0]
            for name, job in group.jobs.items():
                jobs[name] = cluster.wait_for(job, RUN_TIMEOUT_S)
                jobs[name]["output"] = (group.folder / f"{name}.out").read_text()
        for group in groups.values():
            group.tracked.wait_all_gone(GONE_BOUND_S)
    torchrun_references.finished()
    folders = {name: group.folder for name, group in groups.items()}
    return {"out": out, "jobs": jobs, "folders": folders, "gone": gone}


def _hashes(text):
    return {int(rank): (int(world), weights) for rank, world, weights in DONE.findall(text)}


def test_srun_runs_the_flat_api_script_to_torchruns_weights(slurm_runs, torchrun_references):
    _, torchrun_example = torchrun_references.finished()
    reference = _hashes(torchrun_example.stdout)
    assert reference.keys() == {0, 1}, torchrun_example
    out = slurm_runs["out"]
    assert _hashes(out["srun_example"].stdout) == reference, out["srun_example"]


def _same_weights_as_torchrun(torchrun_references, output):
    reference = load_checkpoint(torchrun_references.main_dir)
    checkpoint = load_checkpoint(output)
    assert checkpoint["epoch"] == reference["epoch"] == 2
    assert_bitwise_equal(checkpoint["state_dict"], reference["state_dict"], f"{output}")
    assert_bitwise_equal(checkpoint["optimizer"], reference["optimizer"], f"{output} optimizer")


def test_srun_on_two_nodes_trains_main_to_torchruns_weights(slurm_runs, torchrun_references):
    run = slurm_runs["out"]["two_nodes"]
    assert run.returncode == 0, run
    assert "slurm: rank 0/2, local rank 0/1, node 0/2, master 127.0.0.1:" in run.stdout, run
    _same_weights_as_torchrun(torchrun_references, slurm_runs["folders"]["runs"] / "two_nodes")


def test_sbatch_one_task_per_node_runs_run_8p_to_torchruns_weights(slurm_runs, torchrun_references):
    job = slurm_runs["jobs"]["per_node"]
    assert (job["JobState"], job["ExitCode"]) == ("COMPLETED", "0:0"), job["output"]
    rank0 = (slurm_runs["folders"]["runs"] / "logs" / "rank_0.log").read_text()
    assert "(env: rank 0/2, local rank 0/2, node 0/1" in rank0, rank0
    _same_weights_as_torchrun(torchrun_references, slurm_runs["folders"]["runs"] / "per_node")


def test_a_requeued_job_resumes_from_its_checkpoint_to_the_same_weights(
    slurm_runs, torchrun_references
):
    job = slurm_runs["jobs"]["requeue"]
    log = job["output"]
    assert (job["JobState"], job["ExitCode"], job["Restarts"]) == ("COMPLETED", "0:0", "1"), log
    starts = re.findall(r"^=> tinynet on cpu \((slurm: .*?)\), batch", log, re.M)
    assert len(starts) == 2, log
    assert "restart" not in starts[0] and starts[1].endswith(", restart 1"), starts
    assert re.search(r"^=> resumed .* at epoch 1, step 2$", log, re.M), log
    _same_weights_as_torchrun(torchrun_references, slurm_runs["folders"]["requeue"] / "out")


@pytest.mark.parametrize("name", ["usr1", "term"])
def test_scancel_stops_every_rank_at_once_and_leaves_the_checkpoint_whole(slurm_runs, name):
    job = slurm_runs["jobs"][name]
    assert job["JobState"] in ("FAILED", "CANCELLED"), job
    assert slurm_runs["gone"][name] < STOP_GRACE_S, slurm_runs["gone"]
    output = slurm_runs["folders"][name] / "out"
    saved = load_checkpoint(output)
    assert (saved["epoch"], saved["step"]) == (1, 2), (saved["epoch"], saved["step"])
    assert sorted(p.name for p in output.iterdir() if p.name.startswith(".")) == []
    assert (output / state.CHECKPOINT).is_file()


def test_python_in_the_batch_script_without_srun_is_one_line(slurm_runs):
    job = slurm_runs["jobs"]["batch_only"]
    assert (job["JobState"], job["ExitCode"]) == ("FAILED", "2:0"), job["output"]
    assert job["output"].strip().splitlines() == [
        "error: this is sbatch's batch script, not one of srun's tasks (SLURM_NTASKS=2 "
        "but no SLURM_STEP_ID): start the ranks with srun (srun python SCRIPT), or run "
        "launch/run_8p.sh in one task per node"
    ], job["output"]


def test_nproc_per_node_under_srun_is_one_line_per_task_naming_slurms_variables(slurm_runs):
    run = slurm_runs["out"]["nproc"]
    assert run.returncode == 2, run
    said = sorted(line for line in run.stderr.splitlines() if line.startswith("error: "))
    assert said == [
        "error: --nproc-per-node is for starting ranks without a launcher; slurm started this "
        f"one (SLURM_PROCID={task}, SLURM_NTASKS=2): drop --nproc-per-node (the launcher "
        "decides how many ranks a node runs)"
        for task in (0, 1)
    ], run
    assert "Traceback" not in run.stderr, run

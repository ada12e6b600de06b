"""Open MPI's mpirun, MPICH's mpiexec and DeepSpeed's launcher for real: each starts the
flat-API example and main.py to torchrun's weights and ends the whole job when a rank is
killed; under the MPI launchers every rank refuses more ranks than devices with one line.

One module-scoped run starts everything at once (the 2-core machine runs them side by side)
and the tests read what it left:

- torchrun's 2-rank runs of examples/launch_local_rank.py and of main.py, the references
  (the session's, tests/conftest.py: test_slurm.py reads them too);
- `mpirun.openmpi -np 2 --oversubscribe`, `mpiexec.mpich -n 2` and `deepspeed --num_gpus
  2` of both (support.launchers: a free master port each; Open MPI as root needs its two
  OMPI_ALLOW_RUN_AS_ROOT variables; DeepSpeed 0.19.8 runs on a CPU machine as it is, with
  its CPU accelerator);
- under each, main.py whose rank 1 SIGKILLs itself mid-epoch (tests/fault_injection);
- under each MPI launcher, main.py with 2 ranks on a node of 1 NPU (tests/fake_npu, the
  simulated torch_npu);
- `mpirun.openmpi --host localhost:1 -np 2` without --oversubscribe: Open MPI refuses
  before any rank starts, with its own multi-line message and exit code 1, so devicekit
  never runs and cannot speak there; the test holds that refusal to naming the fix and
  leaving nothing behind.

Every run carries its group's marker (support/tracked.py), so "no process left" is read
from /proc, wherever the launcher started a rank. No launcher needs an option to run
in the xdist workers' network namespaces, which have only loopback: the ranks talk through
devicekit's rendezvous and gloo on 127.0.0.1, never through MPI. Without mpirun.openmpi,
mpiexec.mpich or deepspeed the tests skip with the reason (in CI they fail instead).
"""

import contextlib
import json
import os
import re
import shutil

import pytest

from support import torchrun_references as references
from support.launchers import MAIN, MPI, PY, commands, script
from support.npu_wheel import skip_or_fail
from support.paths import TESTS
from support.run_groups import Group
from support.runs import TINY, assert_bitwise_equal, load_checkpoint, tiny_args
from support.tracked import GONE_BOUND_S, poll_until

pytestmark = pytest.mark.slow

MPI_LAUNCHERS = tuple(MPI)  # openmpi, mpich
LAUNCHERS = (*MPI_LAUNCHERS, "deepspeed")
# the launch environment devicekit reports
MODE = {"openmpi": "mpi", "mpich": "mpich", "deepspeed": "deepspeed"}
DONE = re.compile(r"^(?:=> )?rank (\d+)/(\d+) done: weights ([0-9a-f]{16})$", re.M)
FAKE_NPU = TESTS / "fake_npu"
RUN_TIMEOUT_S = 600  # every run of the module, side by side (a busy CI worker is slow)
# A killed rank: step 3 of 200 in epoch 0, one DataLoader worker per rank (processes that
# must go too); the launcher must end the job within DETECT_BOUND_S of the kill.
FAULT_RANK, FAULT_AT_STEP = 1, 3
KILL_ARGS = tiny_args(epochs=50, steps=200, val_steps=None, workers=1, print_freq=1)
DETECT_BOUND_S = 60
# Where a rank refuses and another does not, the other gives up waiting for it after this
# (its own "did not join" line fails the test, and the wait stays bounded).
DIST_TIMEOUT_S = 20
# What each launcher says about a rank that died of SIGKILL.
KILL_REPORT = {
    "openmpi": r"noticed that process rank 1 with PID \d+ on node \S+ exited on signal 9 "
    r"\(Killed\)",
    "mpich": r"YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed \(signal 9\)",
    "deepspeed": r"sigkill_handler\] \[.*'--local_rank=1'.*\] exits with return code = -9",
}
# The line every rank prints when the launcher started more ranks on the node than it has
# devices: the launcher's own count of the node's ranks, and the fix in its own options.
TOO_MANY = {
    "openmpi": "error: mpirun started 2 ranks on this node (OMPI_COMM_WORLD_LOCAL_SIZE=2) "
    "but only 1 npu device(s) are visible (ASCEND_RT_VISIBLE_DEVICES unset): start one "
    "rank per device, at most 1 per node (mpirun -np 1, or -N 1 on several nodes)",
    "mpich": "error: mpiexec started 2 ranks on this node (MPI_LOCALNRANKS=2) but only 1 "
    "npu device(s) are visible (ASCEND_RT_VISIBLE_DEVICES unset): start one rank per "
    "device, at most 1 per node (mpiexec -n 1, or -ppn 1 on several nodes)",
}


def missing(launcher):
    """Why `launcher` cannot run here, or None."""
    if launcher == "deepspeed":
        if shutil.which("deepspeed") is None:
            return "deepspeed is not installed: pip install deepspeed==0.19.8 (the test extra)"
        return None
    if shutil.which(MPI[launcher]) is None:
        package = "openmpi-bin" if launcher == "openmpi" else "mpich"
        return (
            f"{MPI[launcher]} is not installed: apt-get install --no-install-recommends {package}"
        )
    return None


def need(launcher):
    """Skip (fail in CI) the calling test where `launcher` is not installed."""
    reason = missing(launcher)
    if reason:
        skip_or_fail(reason)


def _start_all(root, stack, launchers):
    """Start every run; {group name: Group}."""
    groups = {}

    def group(name):
        groups[name] = Group(stack, root / name)
        return groups[name]

    train = group("train")
    for launcher in launchers:
        out = train.folder / launcher
        example = [*references.EXAMPLE_ARGS, "--out", out]
        train.launch(f"{launcher}_example", launcher, script(references.EXAMPLE), example)
        train.launch(f"{launcher}_main", launcher, MAIN, [*TINY, "--output-dir", f"{out}_main"])
    for launcher in launchers:
        killed = group(f"kill_{launcher}")
        fault = {"kind": "kill", "rank": FAULT_RANK, "at_step": FAULT_AT_STEP}
        fault["stamp"] = killed.folder / "fault.json"
        args = [*KILL_ARGS, "--output-dir", killed.folder / "out"]
        killed.launch(launcher, launcher, MAIN, args, fault)
        if launcher not in MPI:
            continue
        bad = group(f"too_many_{launcher}")
        fake_npu = os.pathsep.join([str(FAKE_NPU), bad.tracked.env()["PYTHONPATH"]])
        args = [*TINY, "--dist-timeout", DIST_TIMEOUT_S, "--output-dir", bad.folder / "out"]
        bad.launch(
            launcher,
            launcher,
            MAIN,
            args,
            PYTHONPATH=fake_npu,
            DEVICEKIT_DEVICE="npu",
            FAKE_NPU_COUNT=1,
        )
    if "openmpi" in launchers:
        slots = group("slots")
        (command,) = commands("openmpi", MAIN, TINY, 2, slots.folder)
        argv = [MPI["openmpi"], "--host", "localhost:1", "-np", "2", PY, "main.py", *TINY]
        argv += ["--output-dir", slots.folder / "out"]
        slots.start("openmpi", argv, slots.tracked.env(**command.env))
    return groups


@pytest.fixture(scope="module")
def mpi_runs(torchrun_references, tmp_path_factory):
    """{group name: Group}, every run of every group ended and its processes gone; plus
    "out": {group name: {run name: Finished}}; torchrun's runs (the references) ended too."""
    launchers = [launcher for launcher in LAUNCHERS if not missing(launcher)]
    if not launchers:
        skip_or_fail("; ".join(missing(launcher) for launcher in LAUNCHERS))
    root = tmp_path_factory.mktemp("mpi")
    with contextlib.ExitStack() as stack:
        groups = _start_all(root, stack, launchers)
        poll_until(
            lambda: all([group.done() for group in groups.values()]),
            RUN_TIMEOUT_S,
            "every run ending with all its processes",
            lambda: json.dumps({n: sorted(g.tracked.alive().values()) for n, g in groups.items()}),
        )
        out = {
            name: {run: group.tracked.read(run) for run in group.started}
            for name, group in groups.items()
        }
    torchrun_references.finished()
    print(f"\n{_report(groups, out)}")
    return dict(groups, out=out)


def _report(groups, out):
    """The measured times, for `pytest -s` (and the README)."""
    lines = [f"{'run':<34} {'exit':>5} {'start->exit':>12}"]
    for name, group in groups.items():
        for run, result in out[name].items():
            lines.append(
                f"{name + '/' + run:<34} {result.returncode:>5} {group.seconds(run):>10.1f} s"
            )
        stamp = group.folder / "fault.json"
        if stamp.exists():
            fault = json.loads(stamp.read_text())
            lines.append(
                f"  rank {fault['rank']} SIGKILLed at step {fault['step']}: the launcher exited "
                f"{max(group.exited.values()) - fault['time']:.2f} s later"
            )
        lines.append(
            f"  last process of {name} gone {group.gone - max(group.exited.values()):.2f} s "
            "after its last launcher's exit"
        )
    return "\n".join(lines)


def _done(text):
    """Every `rank R/W done: weights H` line, sorted: one per rank of the run. (Two
    processes that each thought themselves alone would spawn ranks of their own: twice
    the lines.)"""
    return sorted((int(rank), int(world), weights) for rank, world, weights in DONE.findall(text))


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_the_flat_api_script_trains_to_torchruns_weights(mpi_runs, torchrun_references, launcher):
    need(launcher)
    out = mpi_runs["out"]["train"]
    _, torchrun_example = torchrun_references.finished()
    reference = _done(torchrun_example.stdout)
    assert [rank for rank, *_ in reference] == [0, 1], str(torchrun_example)
    run = out[f"{launcher}_example"]
    assert run.returncode == 0, str(run)
    assert "Traceback" not in run.stderr, str(run)
    # Both ranks read their rank and the world size from the launcher's own variables: a
    # process that did not would start a run of its own.
    assert _done(run.stdout) == reference, str(run)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_main_trains_to_torchruns_checkpoint_bit_for_bit(mpi_runs, torchrun_references, launcher):
    need(launcher)
    out, folder = mpi_runs["out"]["train"], mpi_runs["train"].folder
    run = out[f"{launcher}_main"]
    assert run.returncode == 0, str(run)
    assert "Traceback" not in run.stderr, str(run)
    # Rank 0 names the launch environment devicekit recognised; both ranks report.
    assert re.search(
        rf"^=> tinynet on cpu \({MODE[launcher]}: rank 0/2, local rank 0/2, node 0/1, "
        r"master 127\.0\.0\.1:\d+\)",
        run.stdout,
        re.M,
    ), str(run)
    torchrun_main, _ = torchrun_references.finished()
    assert _done(run.stdout) == _done(torchrun_main.stdout), str(run)
    reference = load_checkpoint(torchrun_references.main_dir)
    checkpoint = load_checkpoint(folder / f"{launcher}_main")
    assert checkpoint["epoch"] == reference["epoch"] == 2
    assert_bitwise_equal(checkpoint["state_dict"], reference["state_dict"], launcher)
    assert_bitwise_equal(checkpoint["optimizer"], reference["optimizer"], f"{launcher} optimizer")


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_killed_rank_ends_the_whole_job(mpi_runs, launcher):
    need(launcher)
    group = mpi_runs[f"kill_{launcher}"]
    run = mpi_runs["out"][f"kill_{launcher}"][launcher]
    stamp_path = group.folder / "fault.json"
    assert stamp_path.exists(), f"the run ended before the fault\n{run}"
    stamp = json.loads(stamp_path.read_text())
    assert (stamp["rank"], stamp["step"]) == (FAULT_RANK, FAULT_AT_STEP), stamp
    # Training was under way: rank 0 had printed progress before rank 1 died.
    assert re.search(r"^Epoch: \[0\]\[\s*\d+/200\]", run.stdout, re.M), str(run)
    # Open MPI exits 137 (128 + SIGKILL), MPICH 9 (the signal's number), DeepSpeed 247
    # (-9 as a byte); none is a usage error.
    assert run.returncode not in (0, 2), str(run)
    assert re.search(KILL_REPORT[launcher], run.stdout + run.stderr), str(run)
    detect_s = group.exited[launcher] - stamp["time"]
    assert detect_s < DETECT_BOUND_S, f"{detect_s:.1f} s from the kill to the launcher's exit"
    gone_s = group.gone - group.exited[launcher]
    assert gone_s < GONE_BOUND_S, f"processes outlived the launcher by {gone_s:.1f} s"


@pytest.mark.parametrize("launcher", MPI_LAUNCHERS)
def test_more_ranks_than_devices_is_one_line_in_every_rank(mpi_runs, launcher):
    """Two ranks on a node with one NPU: every rank refuses at once (MPICH would leave a
    rank that did not refuse waiting for the one that did), naming the launcher's own
    variable and option; the launcher passes exit code 2 on."""
    need(launcher)
    group = mpi_runs[f"too_many_{launcher}"]
    run = mpi_runs["out"][f"too_many_{launcher}"][launcher]
    assert run.returncode == 2, str(run)
    assert "Traceback" not in run.stdout + run.stderr, str(run)
    refusals = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert set(refusals) == {TOO_MANY[launcher]}, str(run)
    # MPICH lets every rank end on its own. Open MPI stops the job once one rank exited
    # non-zero, so the other may be stopped before it printed its line.
    assert len(refusals) == 2 or (launcher == "openmpi" and len(refusals) == 1), str(run)
    assert group.gone - group.exited[launcher] < GONE_BOUND_S
    assert not (group.folder / "out").exists()


def test_too_few_slots_is_open_mpis_own_refusal_before_any_rank(mpi_runs):
    """Open MPI refuses -np 2 on one slot before it starts a rank: devicekit never runs,
    so the message is Open MPI's own (several lines, exit code 1); it names the fix."""
    need("openmpi")
    group, run = mpi_runs["slots"], mpi_runs["out"]["slots"]["openmpi"]
    assert run.returncode == 1, str(run)
    text = run.stdout + run.stderr
    assert "There are not enough slots available in the system" in text, str(run)
    assert "--oversubscribe" in text, str(run)
    assert "error:" not in text and "=> " not in text, f"a rank started\n{run}"
    assert not (group.folder / "out").exists()
    assert group.gone - group.exited["openmpi"] < GONE_BOUND_S

"""Real fault injection: ranks that crash mid-epoch, ranks that never arrive, a master port
that is taken, SIGKILL during a checkpoint write, two nodes in network namespaces, a lost
rank restarted, and signals to the launchers.

Faults are injected from outside the production code: tests/fault_injection/ goes first on
PYTHONPATH, and its sitecustomize.py (which Python runs at start-up in every process,
spawned ranks included) patches trainer.loop when FAULT_KIND is set, so that rank
FAULT_RANK stamps the time and then SIGKILLs itself or raises at step FAULT_AT_STEP. Where
the claim is the launcher's alone, the ranks are stand-ins that import no torch
(tests/fault_injection/stand_in_rank.py), and runs that can show several claims are shared
(module fixtures: the setup failures side by side, the restart runs side by side).

Every process a test starts runs in its own session with FAULT_TEST_MARKER=<unique> in its
environment (inherited by launchers' workers, spawned ranks and DataLoader workers), with
output to files and a timeout on every wait (support/tracked.py). When a test ends,
everything carrying its marker is killed; a run that has to be *killed* there, instead of
ending on its own, fails the test. Each test also has a hard time limit (SIGALRM,
support/time_limit.py). Timings of the launcher runs are printed as a table at the end of
the module (pytest -s) and written as JSON to $DEVICEKIT_FAULT_REPORT when it is set.
"""

import contextlib
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import sys
import time

import pytest

from devicekit.environments import find_free_port
from support.launchers import MAIN, PY, commands, log_dir, script
from support.paths import REPO
from support.processes import taken_port
from support.runs import tiny_args
from support.time_limit import _hard_time_limit, time_limit  # noqa: F401  (autouse fixture)
from support.tracked import FAULT_DIR, GONE_BOUND_S, Tracked, poll_until
from support.two_nodes import (  # noqa: F401  (the fixture two_namespaces)
    TWO_NODE_ARGS,
    run_8p_on_two_nodes,
    two_namespaces_fixture,
)

WRITER = FAULT_DIR / "checkpoint_writer.py"
STAND_IN = FAULT_DIR / "stand_in_rank.py"
EXAMPLES = REPO / "examples"
NETWORK = REPO / "devicekit" / "network.py"

pytestmark = pytest.mark.slow

NPROC = 2
FAULT_RANK = 1
# Kill moments come from a seeded generator; a failing test names the seed (tests/conftest.py),
# and DEVICEKIT_FAULT_SEED=<seed> repeats them.
FAULT_SEED = int(os.environ.get("DEVICEKIT_FAULT_SEED", random.randrange(1 << 30)))
# Of 200 in epoch 0: mid-epoch, a few steps after rank 0 printed.
FAULT_AT_STEP = random.Random(FAULT_SEED).randint(3, 12)
# Long enough that the fault is mid-epoch; -j 1 so DataLoader worker processes exist. A run
# never gets far: it ends at the fault (or the signal), so its length is the start-up (the
# imports, a loader worker each) plus a few steps of ~15 ms plus the launcher's reaction.
TRAIN_ARGS = tiny_args(epochs=50, steps=200, val_steps=None, workers=1, print_freq=1)
# The same without loader workers, for the main.py ranks that raise (a raising rank ends
# its workers itself; on this interpreter each rank's would add a forkserver importing
# torch, see devicekit.workers). The workers of a killed rank: the stand-in ranks' children.
DEATH_ARGS = tiny_args(epochs=50, steps=200, val_steps=None, workers=0, print_freq=1)
SHORT_ARGS = tiny_args(epochs=1, steps=2, val_steps=1, print_freq=1)

START_TIMEOUT_S = 180  # until the fault fires (2 ranks starting on 2 busy cores)
DETECT_BOUND_S = 60  # from the fault to the launcher's exit
NEVER_ARRIVES_BOUND_S = 20  # a rank 0 whose peer never comes (timeout 5 s), beyond setup


def start_main(run, name, launcher, args, directory, fault=None, launcher_args=(), **extra):
    """Start main.py `args` with NPROC ranks under `launcher` (support.launchers; run_8p.sh's
    rank logs in directory/logs) as `name` of `run`, with the fault injector when `fault` is
    given and the variables `extra`; its Popen."""
    (command,) = commands(
        launcher, MAIN, args, NPROC, directory, name=name, launcher_args=launcher_args
    )
    return run.start(name, command.argv, run.env(fault, **command.env, **extra))


def finish_each(runs, timeout):
    """Wait (`timeout` s in all) until run `name` of `runs` ({name: Tracked}) exited, for
    each name; {name: (Finished, time.time() at exit)}, each read as it exits (so that its
    seconds end there)."""
    done = {}

    def all_done():
        for name, run in runs.items():
            if name not in done and run.proc(name).poll() is not None:
                done[name] = run.read(name), time.time()
        return len(done) == len(runs)

    poll_until(
        all_done, timeout, "the end of every run", lambda: f"not ended: {set(runs) - set(done)}"
    )
    return done


@time_limit(60)
def test_the_harness_finds_and_kills_an_escaped_process(tmp_path):
    """What every test below relies on: a process that left its parent's session (as
    launchers' workers do) is still found by the marker, killed, and fails the test."""
    with pytest.raises(AssertionError, match="had to be killed") as failure:
        with Tracked(tmp_path) as run:
            run.start("escape", ["bash", "-c", "setsid sleep 600 & echo $!"], run.env())
            result, _ = run.wait("escape", 30)
            escaped = int(result.stdout)
            # Its command line is sleep's once setsid has made the new session and exec'd.
            poll_until(
                lambda: run.alive().get(escaped, "").startswith("sleep "),
                30,
                "the escaped sleep shows up",
            )
            assert os.getsid(escaped) not in (os.getsid(0), run.proc("escape").pid)
    assert str(escaped) in str(failure.value)
    assert not run.alive()


# -- 1. a rank dies mid-epoch under each launcher ----------------------------------------------

LAUNCHERS = ["torchrun", "launch", "spawn", "run_8p"]
FAULT_KINDS = ["kill", "raise"]
# Which ranks each launcher x fault runs: main.py training (rank 0 in a gloo collective when
# rank 1 raises, main.py's traceback in the launcher's output) under launch, spawn and
# run_8p.sh; stand-in ranks (no torch, tests/fault_injection/stand_in_rank.py) where the
# claim is the launcher's report of that kind of failure. main.py's rank 1 is SIGKILLed
# mid-epoch under torchrun and run_8p.sh in test_a_lost_rank_is_restarted_and_ends_bitwise_
# identical (each launcher stops rank 0 and starts both again), and spawn's cell "kill" is
# the run of test_a_rank_killed_during_a_sharded_save_leaves_the_previous_checkpoint (a
# rank of devicekit.launch(), which main.py --multiprocessing-distributed runs, SIGKILLed).
DEATH_CELLS = [
    ("torchrun", "kill", "stand-in"),
    ("torchrun", "raise", "stand-in"),
    ("launch", "kill", "stand-in"),
    ("launch", "raise", "main.py"),
    ("spawn", "raise", "main.py"),
    ("run_8p", "kill", "stand-in"),
    ("run_8p", "raise", "main.py"),
]


@pytest.fixture(scope="module")
def fault_table():
    """Rows {launcher, fault, detect_s, ...}; printed and written out when the module ends."""
    rows = []
    yield rows
    if not rows:
        return
    rows.sort(key=lambda r: (LAUNCHERS.index(r["launcher"]), FAULT_KINDS.index(r["fault"])))
    print(
        f"\n\nRank {FAULT_RANK} fails at training step {FAULT_AT_STEP} of epoch 0 "
        f"({NPROC} ranks, gloo, CPU):"
    )
    print(
        f"{'launcher':<10} {'fault':<6} {'exit':>5} {'start->fault':>13} "
        f"{'fault->launcher exit':>21} {'left at exit':>13} {'exit->all gone':>15}  reported"
    )
    for r in rows:
        print(
            f"{r['launcher']:<10} {r['fault']:<6} {r['returncode']:>5} "
            f"{r['start_to_fault_s']:>11.2f} s {r['detect_s']:>19.2f} s {r['left_at_exit']:>13} "
            f"{r['gone_after_exit_s']:>13.2f} s"
            f"  {r['reported']}"
        )
    report = os.environ.get("DEVICEKIT_FAULT_REPORT")
    if report:
        with open(report, "w", encoding="utf-8") as handle:
            json.dump(
                {"fault_at_step": FAULT_AT_STEP, "nproc": NPROC, "rows": rows}, handle, indent=2
            )
            handle.write("\n")


_ROOT_CAUSE = re.compile(
    r"Root Cause \(first observed failure\):\s*\[0\]:.*?rank\s*:\s*(\d+) \(local_rank: (\d+)\)"
    r"\s*exitcode\s*:\s*(-?\d+)[^\n]*",
    re.S,
)


def check_names_failing_rank(launcher, fault, result, logs):
    """The launcher's own report of the failure names local rank 1 and how it failed."""
    text = result.stdout + result.stderr
    if launcher in ("torchrun", "launch"):
        match = _ROOT_CAUSE.search(result.stderr)
        assert match, f"no failure summary\n{result}"
        rank, local_rank, exitcode = match.groups()
        assert (rank, local_rank) == (str(FAULT_RANK), str(FAULT_RANK)), match.group(0)
        if fault == "kill":
            assert exitcode == "-9" and "SIGKILL" in match.group(0), match.group(0)
        else:
            assert exitcode == "1", match.group(0)
        return (
            f"Root Cause: rank {rank} (local_rank: {local_rank}), "
            f"{' '.join(match.group(0).splitlines()[-1].split())}"
        )
    if launcher == "spawn":
        how = "was killed by SIGKILL" if fault == "kill" else "exited with code 1"
        start = f"error: local rank {FAULT_RANK} {how}"
        found = [line for line in result.stderr.splitlines() if line.startswith(start)]
        assert found and "the other ranks were stopped" in found[0], f"no {start!r}\n{result}"
        # devicekit reports it; the parent does not die of torch's exception itself.
        assert "ProcessRaisedException" not in text, result
        assert "ProcessExitedException" not in text, result
        return found[0]
    code = 137 if fault == "kill" else 1
    line = f"run_8p: local rank {FAULT_RANK} failed first (exit code {code});"
    found = [text for text in result.stderr.splitlines() if text.startswith(line)]
    assert found, f"no line starting {line!r}\n{result}\n{logs}"
    return found[0]


def _death_row(launcher, fault, result, stamp, exited_at, left_at_exit, gone_s, line):
    """One row of fault_table."""
    return {
        "launcher": launcher,
        "fault": fault,
        "returncode": result.returncode,
        "start_to_fault_s": round(result.seconds - (exited_at - stamp["time"]), 3),
        "detect_s": round(exited_at - stamp["time"], 3),
        "left_at_exit": len(left_at_exit),
        "gone_after_exit_s": round(gone_s, 3),
        "reported": line,
    }


@time_limit(300)
@pytest.mark.parametrize(
    "launcher, fault, rank_program",
    DEATH_CELLS,
    ids=[f"{cell[0]}-{cell[1]}" for cell in DEATH_CELLS],
)
def test_a_rank_dies_mid_epoch(launcher, fault, rank_program, tmp_path, fault_table):
    """Rank 1 SIGKILLs itself or raises: the launcher exits non-zero (not the usage error's
    2; run_8p.sh with the rank's own code) within DETECT_BOUND_S of the fault, names local
    rank 1 and how it failed, and no process of the run (loader workers included) is left.
    Where the rank is main.py, the fault comes mid-epoch after rank 0 printed progress, and
    a raise's traceback reaches the launcher's output."""
    stamp_path, out_dir, logs_dir = tmp_path / "fault.json", tmp_path / "out", log_dir(tmp_path)
    fault_env = {"kind": fault, "rank": FAULT_RANK, "at_step": FAULT_AT_STEP, "stamp": stamp_path}
    # A master port given spares run_8p.sh its lookup (an interpreter importing torch).
    extra = {"MASTER_PORT": find_free_port()} if launcher == "run_8p" else {}
    with Tracked(tmp_path) as run:
        if rank_program == "main.py":
            args, program = [*DEATH_ARGS, "--output-dir", out_dir], MAIN
        else:
            args, program = [], script(STAND_IN)
        (command,) = commands(launcher, program, args, NPROC, tmp_path, name="launcher")
        proc = run.start("launcher", command.argv, run.env(fault_env, **command.env, **extra))
        # The fault fires (or the launcher ends early, which fails below).
        poll_until(
            lambda: stamp_path.exists() or proc.poll() is not None,
            START_TIMEOUT_S,
            "the injected fault",
            lambda: str(run.read("launcher")),
        )
        assert stamp_path.exists(), f"the run ended before the fault\n{run.read('launcher')}"
        stamp = json.loads(stamp_path.read_text())
        result, exited_at = run.wait("launcher", DETECT_BOUND_S + 30)
        detect_s = exited_at - stamp["time"]
        left_at_exit = run.alive()  # e.g. loader workers of a killed rank, until they notice
        gone_s = run.wait_all_gone(GONE_BOUND_S)

    logs = "".join(f"--- {p.name}\n{p.read_text()[-4000:]}" for p in sorted(logs_dir.glob("*.log")))
    assert stamp["rank"] == FAULT_RANK and stamp["step"] == FAULT_AT_STEP, stamp
    assert result.returncode not in (0, None), f"{result}\n{logs}"
    assert result.returncode != 2, f"a crash is not a usage error\n{result}\n{logs}"
    if launcher == "run_8p":
        assert result.returncode == (137 if fault == "kill" else 1), f"{result}\n{logs}"
    assert detect_s < DETECT_BOUND_S, f"{detect_s:.1f} s from fault to launcher exit\n{result}"
    if rank_program == "main.py":
        # Training was under way: rank 0 had printed progress before rank 1 failed.
        under_way = r"^Epoch: \[0\]\[\s*\d+/200\]"
    else:
        under_way = r"^up 0$"
    assert re.search(under_way, result.stdout, re.M), f"{result}\n{logs}"
    line = check_names_failing_rank(launcher, fault, result, logs)
    if fault == "raise":
        where = logs if launcher == "run_8p" else result.stderr
        assert "RuntimeError: injected fault" in where, f"{result}\n{logs}"
    else:
        assert "injected fault" not in result.stdout + result.stderr + logs
    fault_table.append(
        _death_row(launcher, fault, result, stamp, exited_at, left_at_exit, gone_s, line)
    )


# -- 2. a rank that never arrives ------------------------------------------------------------------

SETUP_ARGS = [*SHORT_ARGS, "--dist-timeout", "5"]


@pytest.fixture(scope="module")
def setup_failures(tmp_path_factory):
    """The ranks whose setup fails, all at once beside one baseline (support.tracked's
    start_baseline: the same command refused once Python, torch and the trainer are loaded,
    under the same load): rank 0 of 2 whose peer never comes (the env and the Ascend
    idioms), rank 0 whose master port is taken, rank 1 whose master port is another
    service's (it accepts connections and never answers as a torch store), rank 1 whose
    master address does not resolve. {"results": {name: Finished}, "ports": {name: port},
    "outputs": {name: its --output-dir}}; each Finished is read as it exits."""
    tmp_path = tmp_path_factory.mktemp("setup_failures")
    ports = {"never-env": find_free_port(), "never-ascend": find_free_port()}
    outputs = {}
    with contextlib.ExitStack() as stack:
        ports["taken"] = stack.enter_context(taken_port())
        ports["held"] = stack.enter_context(taken_port())
        run = stack.enter_context(Tracked(tmp_path))
        rank = {"RANK": 0, "WORLD_SIZE": 2, "LOCAL_RANK": 0, "MASTER_ADDR": "127.0.0.1"}
        starts = {
            "never-env": ([], dict(rank, MASTER_PORT=ports["never-env"])),
            "never-ascend": (["--port", ports["never-ascend"]], {"RANK_ID": 0, "RANK_SIZE": 2}),
            "taken": ([], dict(rank, MASTER_PORT=ports["taken"])),
            "held": ([], dict(rank, RANK=1, LOCAL_RANK=1, MASTER_PORT=ports["held"])),
            "unresolved": (
                [],
                dict(
                    rank,
                    RANK=1,
                    LOCAL_RANK=1,
                    MASTER_ADDR="nonexistent.invalid",
                    MASTER_PORT=find_free_port(),
                ),
            ),
        }
        argvs = {}
        for name, (args, variables) in starts.items():
            outputs[name] = tmp_path / name / "out"
            argvs[name] = [PY, "main.py", *SETUP_ARGS, *args, "--output-dir", outputs[name]]
            run.start(name, argvs[name], run.env(**variables))
        run.start_baseline("never-env", argvs["never-env"], run.env(**starts["never-env"][1]))
        names = [*starts, "never-env-baseline"]
        results = {
            name: result for name, (result, _) in finish_each({n: run for n in names}, 120).items()
        }
        run.wait_all_gone(GONE_BOUND_S)
    baseline = results.pop("never-env-baseline")
    assert baseline.returncode == 2 and "is not below" in baseline.stderr, baseline
    return {"results": results, "baseline": baseline, "ports": ports, "outputs": outputs}


@time_limit(60)
@pytest.mark.parametrize("idiom", ["env", "ascend"])
def test_a_rank_that_never_arrives(idiom, setup_failures):
    result = setup_failures["results"][f"never-{idiom}"]
    port = setup_failures["ports"][f"never-{idiom}"]
    waited_s = result.seconds - setup_failures["baseline"].seconds
    print(f"\n[{idiom}] rank 0 alone gave up {waited_s:.1f} s after setup (--dist-timeout 5)")
    assert result.returncode == 2, result
    assert waited_s < NEVER_ARRIVES_BOUND_S, (setup_failures["baseline"].seconds, result)
    lines = result.stderr_lines()
    assert len(lines) == 1, result
    assert re.search(r"rank\(s\) 1 of 2 did not join .*within --dist-timeout 5s", lines[0]), lines
    assert str(port) in lines[0], lines
    assert result.stdout == "", result
    assert not setup_failures["outputs"][f"never-{idiom}"].exists()


# -- 3. the master port is taken ---------------------------------------------------------------


@time_limit(60)
def test_master_port_taken_is_one_line(setup_failures):
    result, port = setup_failures["results"]["taken"], setup_failures["ports"]["taken"]
    assert result.returncode == 2, result
    lines = result.stderr_lines()
    assert len(lines) == 1, result
    assert f"master port {port}" in lines[0] and "in use" in lines[0], lines
    assert result.stdout == "", result


# -- 4. SIGKILL while a checkpoint is being written ---------------------------------------------

KILLS = 15
CHECKPOINT_MB = 20


def _progress(path):
    """What the writers logged: {"ready": [pid, ...], "resumed": [the epoch each writer
    read from the target, ...], "died": {pid: wait status}, "started": last epoch begun,
    "done": last epoch finished, "last": last event}."""
    words = (
        [line.split() for line in path.read_text().splitlines() if line.strip()]
        if path.exists()
        else []
    )
    return {
        "ready": [int(w[2]) for w in words if w[0] == "ready"],
        "resumed": [int(w[1]) for w in words if w[0] == "ready"],
        "died": {int(w[1]): int(w[2]) for w in words if w[0] == "died"},
        "started": max((int(w[1]) for w in words if w[0] == "start"), default=0),
        "done": max((int(w[1]) for w in words if w[0] == "done"), default=0),
        "last": next((w[0] for w in reversed(words) if w[0] != "died"), None),
    }


def _check_checkpoint(path, numel):
    """Load `path` as main.py would (weights_only); return its epoch if it is one whole write."""
    import torch

    from devicekit import checkpoint_files

    state = checkpoint_files.load(str(path))
    epoch = state["epoch"]
    weights = state["weights"]
    assert isinstance(epoch, int) and int(state["last"]) == epoch, "mixed writes"
    assert weights.numel() == numel, f"{weights.numel()} of {numel} elements"
    assert bool(torch.all(weights == float(epoch))), "weights of another epoch"
    return epoch


@time_limit(240)
def test_sigkill_during_checkpoint_writes_never_leaves_a_partial_file(tmp_path):
    seed = FAULT_SEED
    rng = random.Random(f"{seed}:checkpoint-writes")
    target, progress = tmp_path / "checkpoint.pth.tar", tmp_path / "progress.log"
    numel = CHECKPOINT_MB * (1 << 20) // 4
    previous_epoch, mid_write, events = 0, 0, []

    def ready(round_):
        """Writer `round_`'s pid, once it is ready (it loaded the target, as a resumed run)."""
        poll_until(
            lambda: len(_progress(progress)["ready"]) > round_ or zygote.poll() is not None,
            60,
            f"writer {round_} ready",
            lambda: str(run.read("writers")),
        )
        pids = _progress(progress)["ready"]
        assert len(pids) > round_, f"the writers stopped early\n{run.read('writers')}"
        assert pids[round_] in run.alive(), f"writer {round_} died\n{run.read('writers')}"
        return pids[round_]

    def kill(pid):
        os.kill(pid, signal.SIGKILL)
        poll_until(lambda: pid in _progress(progress)["died"], 30, f"writer {pid} reaped")
        status = _progress(progress)["died"][pid]
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status

    with Tracked(tmp_path) as run:
        # One process imports torch and forks the writers one after another: KILLS killed at
        # random moments, then one that must resume from what they left and write past it.
        zygote = run.start(
            "writers", [PY, WRITER, target, progress, CHECKPOINT_MB, KILLS + 1], run.env()
        )
        for round_ in range(KILLS):
            pid = ready(round_)
            # The crash comes at a random moment across the next few writes (each ~0.1 s).
            # Meanwhile the target, once written, must always be a whole file.
            kill_at = time.monotonic() + rng.uniform(0.0, 1.0)
            while time.monotonic() < kill_at:
                if target.exists():
                    assert target.stat().st_size > numel * 4, "a partial file at the target"
                time.sleep(0.01)
            kill(pid)
            state = _progress(progress)
            mid_write += state["last"] == "start"
            if state["done"] == 0:
                assert not target.exists(), "a checkpoint before any write completed"
                events.append((round_, state["last"], None))
                continue
            epoch = _check_checkpoint(target, numel)  # every kill: loads, whole, consistent
            assert state["done"] <= epoch <= state["started"], (state, epoch)
            assert epoch >= previous_epoch
            previous_epoch = epoch
            events.append((round_, state["last"], epoch))
        leftovers = sorted(tmp_path.glob(".checkpoint.pth.tar.*.tmp"))
        print(
            f"\n{KILLS} SIGKILLs (seed {seed}), {mid_write} during a write, last epoch "
            f"{previous_epoch}, {len(leftovers)} temporary file(s) left behind"
        )
        assert mid_write >= 1, f"no kill landed during a write (seed {seed}): {events}"
        assert previous_epoch >= 1, events
        # A kill during a write leaves its temporary file until the next complete write
        # removes it; none of them affects loading (checked after every kill, above) nor
        # the next writer, which resumes from the epoch the last kill left and replaces
        # it. (The writers' process forks that writer as soon as the last one died: it may
        # be writing past that epoch already, so the target is not read again here.)
        pid = ready(KILLS)
        assert _progress(progress)["resumed"][KILLS] == previous_epoch, _progress(progress)
        poll_until(
            lambda: _progress(progress)["done"] > previous_epoch or zygote.poll() is not None,
            60,
            "a write after the crashes",
            lambda: str(run.read("writers")),
        )
        kill(pid)
        result, _ = run.wait("writers", 30)
        assert result.returncode == 0, result
        run.wait_all_gone(GONE_BOUND_S)
    assert _check_checkpoint(target, numel) > previous_epoch


@time_limit(240)
def test_ctrl_c_of_run_8p_during_checkpoint_writes_leaves_no_temporary_file(tmp_path):
    """Ctrl-C of run_8p.sh (SIGINT; the script stops its ranks with SIGTERM) while both ranks
    write checkpoints back to back, sent as rank 0 begins a write (rank 1 is wherever it is
    then): the write under way is undone (its temporary file removed) before the rank ends,
    and each rank's last checkpoint is a whole one. Before ranks handled SIGTERM during a
    write, 2 tries in 3 at random moments left a file."""
    numel = CHECKPOINT_MB * (1 << 20) // 4
    args = [tmp_path / "ckpt_{rank}.pt", tmp_path / "progress_{rank}.log", CHECKPOINT_MB]
    (command,) = commands("run_8p", WRITER, args, NPROC, tmp_path, name="run")
    progress = [tmp_path / f"progress_{rank}.log" for rank in range(NPROC)]
    with Tracked(tmp_path) as run:
        # A master port given spares the script its lookup (an interpreter's start).
        proc = run.start("run", command.argv, run.env(**command.env, MASTER_PORT=find_free_port()))
        poll_until(
            lambda: all(_progress(p)["done"] for p in progress) or proc.poll() is not None,
            START_TIMEOUT_S,
            "both ranks writing",
            lambda: str(run.read("run")),
        )
        poll_until(
            lambda: _progress(progress[0])["last"] == "start" or proc.poll() is not None,
            30,
            "rank 0 beginning a write",
            lambda: str(run.read("run")),
        )
        proc.send_signal(signal.SIGINT)
        result, _ = run.wait("run", 30)
        run.wait_all_gone(GONE_BOUND_S)
    assert result.returncode == 130, result
    landed = []
    for rank, log in enumerate(progress):
        state = _progress(log)
        landed.append(state["last"] == "start")
        epoch = _check_checkpoint(tmp_path / f"ckpt_{rank}.pt", numel)
        assert state["done"] <= epoch <= state["started"], (rank, state, epoch)
    assert landed[0], f"the signal did not land during rank 0's write: {landed}"
    assert not list(tmp_path.glob(".ckpt_*.tmp")), sorted(p.name for p in tmp_path.iterdir())


@time_limit(240)
def test_a_rank_killed_during_a_sharded_save_leaves_the_previous_checkpoint(tmp_path, fault_table):
    """gpt_pretrain --strategy shard on 2 ranks saves its checkpoint folder every iteration;
    rank 1 is SIGKILLed in the second save, its shard file written, the metadata not yet.
    The run ends naming rank 1, and the folder still holds the first save, whole: it loads
    here, into a plain model. (The next save replaces the half-written folder: the
    one-process run of tests/test_sharding.py saves over one.)

    It is also the cell (spawn, kill) of test_a_rank_dies_mid_epoch: devicekit.launch()'s
    supervisor, which main.py --multiprocessing-distributed runs too, exits within
    DETECT_BOUND_S of the kill with its own line (not torch's exception) saying the other
    ranks were stopped, and none of them is left."""
    import torch

    import devicekit

    sys.path.insert(0, str(EXAMPLES))
    try:
        from gpt_pretrain import TinyGPT
    finally:
        sys.path.remove(str(EXAMPLES))
    out, stamp = tmp_path / "gpt", tmp_path / "fault.json"
    args = ["--strategy", "shard", "--batch-size", "4", "--iters", "2"]
    args += ["--save-every", "1", "--out", out]
    (command,) = commands("python", script(EXAMPLES / "gpt_pretrain.py"), args, NPROC, tmp_path)
    fault = {"kind": "kill-in-save", "rank": FAULT_RANK, "at_save": 2, "stamp": stamp}
    with Tracked(tmp_path) as run:
        run.start("killed", command.argv, run.env(fault, **command.env))
        killed, exited_at = run.wait("killed", 150)
        left_at_exit = run.alive()
        gone_s = run.wait_all_gone(GONE_BOUND_S)
    fired = json.loads(stamp.read_text())
    assert fired["rank"] == FAULT_RANK, killed
    assert exited_at - fired["time"] < DETECT_BOUND_S, (exited_at - fired["time"], killed)
    line = check_names_failing_rank("spawn", "kill", killed, "")
    assert killed.returncode == 1, killed
    fault_table.append(
        _death_row("spawn", "kill", killed, fired, exited_at, left_at_exit, gone_s, line)
    )
    partial = {p.name for p in out.with_name("gpt.partial").iterdir()}
    assert "__1_0.distcp" in partial and ".metadata" not in partial, partial
    model = TinyGPT()
    assert devicekit.load_checkpoint(out, into={"model": model})["iter"] == 1
    assert all(torch.isfinite(t).all() for t in model.state_dict().values())


# -- 5. two nodes in network namespaces --------------------------------------------------------


@pytest.mark.two_node
@time_limit(120)
def test_interface_towards_inside_a_namespace(two_namespaces, tmp_path):
    ns = two_namespaces
    # devicekit/network.py loaded on its own (it needs the standard library only): the
    # package's __init__ would import torch, which this probe does not need.
    code = (
        "import importlib.util, json; "
        f"spec = importlib.util.spec_from_file_location('network', {str(NETWORK)!r}); "
        "n = importlib.util.module_from_spec(spec); spec.loader.exec_module(n); "
        f"print(json.dumps([n.interface_towards({ns['addresses'][1]!r}, 29500), "
        f"n.interface_towards('127.0.0.1', 29500), "
        f"n.local_address_towards({ns['addresses'][1]!r}, 29500)]))"
    )
    with Tracked(tmp_path) as run:
        run.start("probe", ["ip", "netns", "exec", ns["names"][0], PY, "-c", code], run.env())
        result, _ = run.wait("probe", 60)
        run.wait_all_gone(GONE_BOUND_S)
    assert result.returncode == 0, result
    assert json.loads(result.stdout) == [ns["links"][0], None, ns["addresses"][0]], result


@pytest.mark.two_node
@time_limit(240)
def test_two_nodes_in_network_namespaces(two_namespaces, tmp_path):
    ns = two_namespaces
    with Tracked(tmp_path) as run:
        results = run_8p_on_two_nodes(run, ns, TWO_NODE_ARGS, tmp_path)
    logs = {
        (node, i): (tmp_path / f"node{node}" / f"rank_{i}.log").read_text()
        for node in (0, 1)
        for i in (0, 1)
    }
    everything = "\n".join(map(str, results)) + "".join(
        f"\n--- node {n} rank_{i}.log\n{text}" for (n, i), text in logs.items()
    )
    assert [r.returncode for r in results] == [0, 0], everything
    hashes = {}
    for (node, i), text in logs.items():
        rank = node * 2 + i
        last = [line for line in text.splitlines() if line.strip()][-1]
        match = re.fullmatch(rf"=> rank {rank}/4 done: weights ([0-9a-f]+)", last)
        assert match, f"node {node} rank_{i}.log ends with {last!r}\n{everything}"
        hashes[rank] = match.group(1)
    assert sorted(hashes) == [0, 1, 2, 3] and len(set(hashes.values())) == 1, hashes
    assert (tmp_path / "out0" / "checkpoint.pth.tar").is_file()
    assert not (tmp_path / "out1").exists(), "only global rank 0 writes"
    assert "world_size" in (tmp_path / "out0" / "metrics.jsonl").read_text()
    assert (
        json.loads((tmp_path / "out0" / "metrics.jsonl").read_text().splitlines()[-1])["world_size"]
        == 4
    )


# -- 6. a lost rank costs a few steps and no human -----------------------------------------------

# No loader workers: the samples are seeded by epoch and index (trainer.loaders), so the
# weights do not depend on them, and every restart would start one more process per rank.
RESTART_ARGS = [*tiny_args(steps=12), "--seed", "3", "--resume", "auto"]
SAVE_EVERY = 3
RESTART_STEPS = 24  # 2 epochs of 12
# The undisturbed run and a run per launcher whose rank 1 is SIGKILLed once (each restarts).
RESTART_RUNS = {"undisturbed": "spawn", "torchrun": "torchrun", "run_8p": "run_8p"}


@contextlib.contextmanager
def port_29500_held():
    """Port 29500 bound on every address (what a TCPStore on it would need) and listened on
    while the block runs; yields None, or why it cannot be bound here."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        try:
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no owner
            holder.bind(("", 29500))
            holder.listen()
        except OSError as error:
            yield f"port 29500 cannot be bound here ({error}), so it cannot be held"
        else:
            yield None
    finally:
        holder.close()


@pytest.fixture(scope="module")
def restart_runs(tmp_path_factory):
    """RESTART_RUNS at the same time, to their end, while port 29500 is held: the
    undisturbed run (main.py's own spawn) and, under torchrun (--max-restarts 1) and
    run_8p.sh (MAX_RESTARTS=1), a run whose rank 1 is SIGKILLed once at a step drawn for
    the launcher. {"why_29500_free": None or why, name: {"result", "seconds", "text",
    "checkpoint" (None if missing), "weights", "killed_at", "stamp"}}."""
    root = tmp_path_factory.mktemp("restart")
    runs, found = {}, {}
    with contextlib.ExitStack() as stack:
        found["why_29500_free"] = stack.enter_context(port_29500_held())
        for name, launcher in RESTART_RUNS.items():
            folder = root / name
            run = runs[name] = stack.enter_context(Tracked(folder))
            args = [*RESTART_ARGS, "--save-every", SAVE_EVERY, "--output-dir", folder / "out"]
            fault, extra, killed_at = None, {}, None
            if name != "undisturbed":
                killed_at = random.Random(f"{FAULT_SEED}:restart:{launcher}").randint(
                    2, RESTART_STEPS - 1
                )
                fault = {"kind": "kill", "rank": FAULT_RANK, "at_step": killed_at}
                fault.update(stamp=folder / "fault.json", once=1)
                extra = {"MAX_RESTARTS": 1}
            launcher_args = ["--max-restarts", 1] if launcher == "torchrun" else []
            start_main(run, name, launcher, args, folder, fault, launcher_args, **extra)
            found[name] = {"killed_at": killed_at, "stamp": folder / "fault.json"}
        for name, (result, _) in finish_each(runs, 400).items():
            logs = "".join(p.read_text() for p in sorted(log_dir(root / name).glob("*.log")))
            text = result.stdout + result.stderr + logs
            checkpoint = root / name / "out" / "checkpoint.pth.tar"
            found[name].update(
                result=result,
                seconds=result.seconds,
                text=text,
                checkpoint=torch_load(checkpoint) if checkpoint.is_file() else None,
                weights=sorted(
                    set(re.findall(r"^=> rank (\d+)/2 done: weights ([0-9a-f]+)$", text, re.M))
                ),
            )
        for run in runs.values():
            run.wait_all_gone(GONE_BOUND_S)
    return found


@pytest.fixture(scope="module")
def restart_table():
    """Rows {launcher, killed_at_step, steps_redone, extra_s}; printed when the module ends."""
    rows = []
    yield rows
    if rows:
        print(
            f"\n\nA rank SIGKILLed mid-run and restarted (--save-every {SAVE_EVERY}, "
            f"{RESTART_STEPS} steps, seed {FAULT_SEED}; the runs side by side):"
        )
        for r in rows:
            print(
                f"  {r['launcher']:<9} killed at step {r['killed_at_step']:>2}: "
                f"{r['steps_redone']} step(s) redone, {r['extra_s']:.1f} s more than the "
                f"undisturbed run, weights bitwise identical"
            )


def torch_load(path):
    import torch

    return torch.load(path, weights_only=True)


@time_limit(60)
def test_single_node_spawn_needs_no_port_even_with_29500_taken(restart_runs):
    """main.py's own spawn on one node trains to its end while port 29500 is taken (the
    undisturbed run of restart_runs): it picked a free port for its ranks' rendezvous."""
    if restart_runs["why_29500_free"]:
        pytest.skip(restart_runs["why_29500_free"])
    calm = restart_runs["undisturbed"]
    result = calm["result"]
    assert result.returncode == 0, result
    master = re.search(r"master 127\.0\.0\.1:(\d+)\)", result.stdout)
    assert master and master.group(1) != "29500", result
    hashes = re.findall(r"^=> rank (\d)/2 done: weights (\w+)$", result.stdout, re.M)
    assert sorted(r for r, _ in hashes) == ["0", "1"] and len({h for _, h in hashes}) == 1, result
    assert calm["checkpoint"] is not None, result


@time_limit(60)
@pytest.mark.parametrize("launcher", ["torchrun", "run_8p"])
def test_a_lost_rank_is_restarted_and_ends_bitwise_identical(launcher, restart_runs, restart_table):
    """main.py's rank 1 SIGKILLed mid-run: the launcher stops rank 0 and starts both
    again, the run resumes from its last mid-epoch checkpoint (--resume auto, --save-every
    3) and ends with the weights of the undisturbed run, bit for bit. run_8p.sh names the
    rank that failed first and its exit code (137)."""
    calm, hit = restart_runs["undisturbed"], restart_runs[launcher]
    text, killed_at = hit["text"], hit["killed_at"]
    assert calm["result"].returncode == 0, calm["result"]
    assert hit["result"].returncode == 0, text
    assert hit["stamp"].exists(), f"the fault never fired\n{text}"
    if launcher == "run_8p":
        line = f"run_8p: local rank {FAULT_RANK} failed first (exit code 137);"
        assert line in text and "restarting every rank (restart 1 of" in text, text
    done_before = killed_at - 1  # the killed step itself never finished
    # Checkpoints come every SAVE_EVERY steps of an epoch and at its end (12 = 4 x 3).
    saved = done_before - done_before % SAVE_EVERY
    epoch, step = divmod(saved, 12)
    if saved:
        assert f"checkpoint.pth.tar' at epoch {epoch}, step {step}" in text, text
    else:  # killed before the first checkpoint: --resume auto starts afresh
        assert "=> resumed" not in text, text
    calm_weights, hit_weights = calm["weights"], hit["weights"]
    assert len(calm_weights) == len(hit_weights) == 2, (calm_weights, hit_weights)
    assert {w for _, w in calm_weights} == {w for _, w in hit_weights}, (calm_weights, hit_weights)
    calm_state, hit_state = calm["checkpoint"], hit["checkpoint"]
    assert calm_state["epoch"] == hit_state["epoch"] == 2
    assert calm_state["step"] == hit_state["step"] == 0
    for key, tensor in calm_state["state_dict"].items():
        assert hit_state["state_dict"][key].equal(tensor), f"{key} differs after the restart"
    restart_table.append(
        {
            "launcher": launcher,
            "killed_at_step": killed_at,
            "steps_redone": done_before - saved,
            "extra_s": hit["seconds"] - calm["seconds"],
        }
    )


# -- 7. signals stop the whole run ---------------------------------------------------------------

SIGNALS = ["SIGHUP", "SIGINT", "SIGTERM"]
# One real training run, under devicekit's spawn supervisor: main.py's ranks (whatever
# signal their launcher got, each launcher stops them with SIGTERM) and their loader
# workers stop, without a traceback or a warning. What each launcher does with each signal
# is checked with stand-in ranks (tests/fault_injection/stand_in_rank.py: no torch, a child
# in the rank's process group as a loader worker is), since it is the launcher's, whatever
# its ranks run: run_8p.sh in test_run_8p_stops_every_rank_on_each_signal, spawn's
# supervisor (devicekit.launch) in test_the_spawn_supervisor_stops_every_rank_on_each_signal,
# torchrun here (see the docstring).
SIGNAL_RUNS = [("spawn", "SIGHUP"), ("torchrun", "SIGTERM")]


def check_stopped_by_a_signal(result, signame, gone_s):
    """What devicekit's launchers (main.py's spawn supervisor, run_8p.sh) do on a stop
    signal: exit 128 + its number, the last line of stderr naming it says the ranks were
    stopped, no traceback or warning, and no process of the run is left 10 s after."""
    assert result.returncode == 128 + getattr(signal, signame), result
    lines = [line for line in result.stderr.splitlines() if signame[3:] in line]
    assert lines and "stopped" in lines[-1], result
    assert "Traceback" not in result.stderr, result
    # The ranks' loader queues, left to multiprocessing's tracker, are no "leak" to report.
    assert "leaked semaphore" not in result.stderr, result
    assert gone_s < 10, f"ranks outlived the launcher by {gone_s:.1f} s"


def training_under_way(run, proc):
    """Wait until rank 0 of main.py has printed its second step (or the run ended)."""
    poll_until(
        lambda: (
            re.search(r"^Epoch: \[0\]\[\s*2/200\]", run.read("run").stdout, re.M)
            or proc.poll() is not None
        ),
        START_TIMEOUT_S,
        "training under way",
        lambda: str(run.read("run")),
    )


@time_limit(180)
@pytest.mark.parametrize("launcher, signame", SIGNAL_RUNS)
def test_a_signal_to_the_launcher_stops_every_rank(launcher, signame, tmp_path):
    """The terminal closes (SIGHUP), Ctrl-C (SIGINT), a scheduler stops the job (SIGTERM):
    every rank and loader worker is gone at once, the launcher exits 128 + the signal.

    spawn: main.py training (SIGHUP), the supervisor's own line the last it prints.
    torchrun, with stand-in ranks: its SIGHUP and SIGINT are not rerun: torchrun is torch's,
    which handles SIGTERM, SIGINT, SIGHUP and SIGQUIT with one and the same handler (its
    --signals-to-handle), and its way of exiting on a signal is torch's convention, not
    devicekit's; this run checks that convention (its workers and their children stopped,
    a non-zero exit naming the signal). How main.py's ranks take the SIGTERM that every
    launcher sends them is the spawn run's.
    """
    with Tracked(tmp_path) as run:
        if launcher == "spawn":
            args = [*TRAIN_ARGS, "--output-dir", tmp_path / "out"]
            proc = start_main(run, "run", launcher, args, tmp_path)
            training_under_way(run, proc)
        else:
            (command,) = commands(launcher, script(STAND_IN), [], NPROC, tmp_path, name="run")
            proc = run.start("run", command.argv, run.env(**command.env))
            every_rank_up(
                run, proc, lambda i: re.search(rf"^up {i}$", run.read("run").stdout, re.M)
            )
        proc.send_signal(getattr(signal, signame))
        result, _exited_at = run.wait("run", 30)
        gone_s = run.wait_all_gone(GONE_BOUND_S)
    if launcher == "torchrun":
        # torchrun's own convention: its workers stopped, it exits non-zero, naming the signal.
        assert result.returncode != 0 and signame in result.stderr, result
        assert gone_s < 10, f"ranks outlived the launcher by {gone_s:.1f} s"
    else:
        check_stopped_by_a_signal(result, signame, gone_s)
        assert result.stderr_lines()[-1] == (
            f"devicekit: {signame} received: stopped all {NPROC} ranks"
        ), result


# A rank that says it is up and waits under devicekit.launch(), the supervisor of main.py
# --multiprocessing-distributed.
_IDLE_LAUNCH = f"""import os, time

import devicekit


def rank(local_rank):
    print("up", local_rank, flush=True)
    time.sleep(300)


if __name__ == "__main__":
    devicekit.launch(rank, nprocs={NPROC})
"""
# PYTHON for run_8p.sh: its free-port lookup gives the port, ends its output and, while the
# script waits for it to exit, sends SIGINT to the launcher alone (the leader of the process
# group the test started).
_SIGINT_DURING_PORT_LOOKUP = """import os, signal, socket, sys, time
if "getsockname" in " ".join(sys.argv):  # run_8p.sh's port lookup
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        print(free.getsockname()[1], flush=True)
    os.close(1)  # the end of the output: the script reads it and waits for the exit
    time.sleep(0.5)
    os.kill(os.getpgid(0), signal.SIGINT)
    time.sleep(0.5)
    os._exit(0)
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""
# `setsid` for run_8p.sh: a rank that does not lead a process group yet when SIGINT comes.
_SIGINT_BEFORE_SETSID = """import os, signal, sys, time
os.kill(int(os.environ["DEVICEKIT_LAUNCHER_PID"]), signal.SIGINT)
time.sleep(60)
os.execv({setsid!r}, [{setsid!r}, *sys.argv[1:]])
"""


def _text_of(path):
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _executable(path, shebang_python, text):
    path.write_text(f"#!{shebang_python}\n{text}")
    path.chmod(0o755)
    return path


def idle_run_8p(tmp_path):
    """run_8p.sh with NPROC stand-in ranks (they say they are up and wait) and a master port
    given (no lookup): (argv, its variables, the rank logs' folder)."""
    (command,) = commands("run_8p", STAND_IN, [], NPROC, tmp_path, name="run")
    return command.argv, dict(command.env, MASTER_PORT=str(find_free_port())), log_dir(tmp_path)


def every_rank_up(run, proc, says_up):
    """Wait until `says_up(i)` for every local rank i (or the launcher ended)."""
    poll_until(
        lambda: all(says_up(i) for i in range(NPROC)) or proc.poll() is not None,
        START_TIMEOUT_S,
        "every rank up",
        lambda: str(run.read("run")),
    )


@time_limit(90)
@pytest.mark.parametrize("signame", SIGNALS)
def test_run_8p_stops_every_rank_on_each_signal(signame, tmp_path):
    """Each stop signal to run_8p.sh once its stand-in ranks are up: every rank and its
    child (as a loader worker) gone within 10 s, exit 128 + the signal, no traceback, and
    the line is the script's own, the last it prints. (How main.py's ranks take the
    SIGTERM the script sends them: test_a_signal_to_the_launcher_stops_every_rank[spawn-SIGHUP].)"""
    argv, extra, logs = idle_run_8p(tmp_path)
    with Tracked(tmp_path) as run:
        proc = run.start("run", argv, run.env(**extra))
        every_rank_up(run, proc, lambda i: "up" in _text_of(logs / f"rank_{i}.log"))
        proc.send_signal(getattr(signal, signame))
        result, _ = run.wait("run", 30)
        gone_s = run.wait_all_gone(GONE_BOUND_S)
    check_stopped_by_a_signal(result, signame, gone_s)
    assert result.stderr_lines()[-1] == f"run_8p: {signame[3:]} received: stopped every rank", (
        result
    )


@time_limit(90)
def test_run_8p_started_with_sighup_ignored_keeps_it_ignored(tmp_path):
    """`nohup bash launch/run_8p.sh`: SIGHUP does nothing, as nohup asks (the ranks train on
    after the terminal closes); SIGTERM still stops every rank."""
    argv, extra, logs = idle_run_8p(tmp_path)
    with Tracked(tmp_path) as run:
        proc = run.start("run", ["nohup", *argv], run.env(**extra))
        every_rank_up(run, proc, lambda i: "up" in _text_of(logs / f"rank_{i}.log"))
        # Each stand-in rank and its child (the stand-in loader worker).
        ranks = {pid for pid, command in run.alive().items() if STAND_IN.name in command}
        assert len(ranks) == 2 * NPROC, run.alive()
        proc.send_signal(signal.SIGHUP)
        time.sleep(1)
        assert proc.poll() is None, run.read("run")
        assert ranks <= set(run.alive()), (ranks, run.alive())
        proc.send_signal(signal.SIGTERM)
        result, _ = run.wait("run", 30)
        gone_s = run.wait_all_gone(GONE_BOUND_S)
    check_stopped_by_a_signal(result, "SIGTERM", gone_s)
    assert "HUP" not in result.stderr, result


@time_limit(120)
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_the_spawn_supervisor_stops_every_rank_on_each_signal(signame, tmp_path):
    """The other stop signals to devicekit.launch()'s supervisor (what main.py
    --multiprocessing-distributed runs) once its ranks are up: what the real run checks
    (test_a_signal_to_the_launcher_stops_every_rank[spawn-SIGHUP], its line included) for
    SIGINT and SIGTERM, with ranks that only sleep, and that the line is the supervisor's
    own, the last it prints."""
    script = tmp_path / "idle_launch.py"
    script.write_text(_IDLE_LAUNCH)
    with Tracked(tmp_path) as run:
        proc = run.start("run", [PY, script], run.env())
        every_rank_up(run, proc, lambda i: re.search(rf"^up {i}$", run.read("run").stdout, re.M))
        proc.send_signal(getattr(signal, signame))
        result, _ = run.wait("run", 30)
        gone_s = run.wait_all_gone(GONE_BOUND_S)
    check_stopped_by_a_signal(result, signame, gone_s)
    assert result.stderr_lines()[-1] == (
        f"devicekit: {signame} received: stopped all {NPROC} ranks"
    ), result


@time_limit(90)
@pytest.mark.parametrize(
    "moment", ["started_with_sigint_ignored", "during_the_port_lookup", "before_setsid"]
)
def test_run_8p_stops_on_sigint_at_any_moment(moment, tmp_path):
    """SIGINT to run_8p.sh stops every rank at once and exits 130 also when the script was
    started with SIGINT ignored (as `run_8p.sh &` in a job script or a CI step starts it: bash
    can neither trap nor reset a signal ignored on entry), when it comes while the script
    waits for its free-port lookup to exit (bash drops a SIGINT that comes while it waits for
    a command substitution, trap or not), and when it comes before a rank leads its own
    process group (signalling the group does not reach it). Each fails on the script before
    these were fixed: the ranks trained on (the first two) or one was left behind."""
    argv, extra, logs = idle_run_8p(tmp_path)
    if moment == "started_with_sigint_ignored":
        argv = ["bash", "-c", f'trap "" INT; exec {shlex.join(argv)}']
    elif moment == "during_the_port_lookup":
        del extra["MASTER_PORT"]  # the script looks one up
        extra["PYTHON"] = _executable(tmp_path / "python", PY, _SIGINT_DURING_PORT_LOOKUP)
    else:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        setsid = shutil.which("setsid")
        _executable(bin_dir / "setsid", PY, _SIGINT_BEFORE_SETSID.format(setsid=setsid))
        extra["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    with Tracked(tmp_path) as run:
        proc = run.start("run", argv, run.env(**extra))
        if moment == "started_with_sigint_ignored":
            every_rank_up(run, proc, lambda i: "up" in _text_of(logs / f"rank_{i}.log"))
            proc.send_signal(signal.SIGINT)
        result, _ = run.wait("run", 30)
        gone_s = run.wait_all_gone(GONE_BOUND_S)
    assert result.returncode == 130, result
    assert result.stderr_lines()[-1] == "run_8p: INT received: stopped every rank", result
    assert gone_s < 10, f"ranks outlived the launcher by {gone_s:.1f} s"
    if moment == "during_the_port_lookup":
        ranks_up = [i for i in range(NPROC) if "up" in _text_of(logs / f"rank_{i}.log")]
        assert not ranks_up, f"ranks {ranks_up} started after the signal\n{result}"


@time_limit(90)
def test_ranks_die_with_run_8p_even_when_it_is_sigkilled(tmp_path):
    """SIGKILL cannot be trapped, so the script cannot stop its ranks: the kernel does
    (setpriv --pdeathsig), also for a script that does not import devicekit."""
    argv, extra, logs = idle_run_8p(tmp_path)
    with Tracked(tmp_path) as run:
        proc = run.start("run", argv, run.env(**extra))
        every_rank_up(run, proc, lambda i: "up" in _text_of(logs / f"rank_{i}.log"))
        proc.kill()
        run.wait("run", 30)
        gone_s = run.wait_all_gone(GONE_BOUND_S)
    assert gone_s < 10, f"ranks outlived the SIGKILLed run_8p.sh by {gone_s:.1f} s"


@time_limit(90)
def test_a_rank_that_imports_devicekit_dies_with_its_sigkilled_launcher(tmp_path):
    """Where setpriv is too old for --pdeathsig (util-linux before 2.33), a rank that imports
    devicekit asks the kernel itself to die with the script whose pid DEVICEKIT_LAUNCHER_PID
    names: here a shell loop of one rank, SIGKILLed."""
    rank = (
        f"{shlex.quote(PY)} -c 'import time, devicekit; print(\"up\", flush=True); time.sleep(300)'"
    )
    with Tracked(tmp_path) as run:
        proc = run.start(
            "run", ["bash", "-c", f"export DEVICEKIT_LAUNCHER_PID=$$; {rank} & wait"], run.env()
        )
        poll_until(
            lambda: "up" in run.read("run").stdout or proc.poll() is not None,
            START_TIMEOUT_S,
            "the rank up",
            lambda: str(run.read("run")),
        )
        proc.kill()
        run.wait("run", 30)
        gone_s = run.wait_all_gone(GONE_BOUND_S)
    assert gone_s < 10, f"the rank outlived its SIGKILLed launcher by {gone_s:.1f} s"


# -- 8. every wait in setup is bounded -----------------------------------------------------------


@time_limit(60)
def test_a_port_held_by_another_service_fails_within_the_timeout(setup_failures):
    """A non-zero rank whose MASTER_PORT is some other service's (it accepts connections and
    never answers as a torch store) fails after --dist-timeout plus the stated margin."""
    from devicekit.rendezvous import STORE_MARGIN_S

    result, port = setup_failures["results"]["held"], setup_failures["ports"]["held"]
    baseline_s = setup_failures["baseline"].seconds
    assert result.returncode == 2, result
    assert result.stderr_lines() == [
        f"error: rank 1: something listens at 127.0.0.1:{port} but did not answer as a torch "
        f"store within --dist-timeout 5s (+{STORE_MARGIN_S:g}s): MASTER_PORT belongs to another "
        "service? Choose a free port for MASTER_PORT on node 0"
    ], result
    assert result.seconds - baseline_s < 5 + STORE_MARGIN_S + 15, (baseline_s, result)


@time_limit(60)
def test_a_master_address_that_does_not_resolve_is_one_line(setup_failures):
    result, baseline_s = setup_failures["results"]["unresolved"], setup_failures["baseline"].seconds
    assert result.returncode == 2, result
    lines = result.stderr_lines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: the master address 'nonexistent.invalid' does not resolve"
    ), result
    assert result.seconds - baseline_s < 5 + 15, (baseline_s, result)

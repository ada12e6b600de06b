"""Real multi-process runs of `python -m devicekit check` (gloo on loopback, 2 ranks).

Every way of starting the check must pass and report the same correctness results:
torchrun, torch.distributed.launch, devicekit's own spawn, a per-rank shell loop (with
LOCAL_RANK exported, or with the legacy `--local_rank N` argument) and Ascend's
RANK_ID/RANK_SIZE idiom. Then the failure paths: a rank that sees a wrong result, a master
port already taken, a rank that never arrives, and too few ranks.

Each child gets an explicit environment and runs under tests/support/processes.py: its own
session, output to files, a timeout on every wait, nothing left running when its test ends.
tests/support/launchers.py builds every launcher's command line.
"""

import contextlib
import io
import json
import re
from unittest import mock

import pytest
import torch  # noqa: F401  before devicekit: see conftest

import devicekit.__main__ as devicekit_command
from devicekit import check
from support.launchers import DEVICEKIT, child_env, commands, start
from support.new_process import devicekit_started_with
from support.paths import TESTS
from support.processes import Processes, describe, taken_port

HELPER_DISAGREE = TESTS / "check_rank_disagrees.py"

NPROC = 2
MAX_BYTES = 65536
CHECK_ARGS = ["check", "--json", "--max-bytes", str(MAX_BYTES)]
RUN_TIMEOUT_S = 180  # a whole 2-rank check on 2 busy cores takes ~5-10 s
FAIL_TIMEOUT_S = 60  # the failure paths must give up well within this

LAUNCHERS = ["torchrun", "launch", "spawn", "env", "env-legacy-local-rank", "ascend"]
# The LaunchContext.mode each start reports. The legacy `--local_rank N` argument is what
# torch 1.x's torch.distributed.launch appended (without exporting LOCAL_RANK), so
# devicekit labels it "launch" -- it cannot tell that from a hand-written loop.
EXPECTED_MODE = {
    "torchrun": "torchrun",
    "launch": "launch",
    "spawn": "spawn",
    "env": "env",
    "env-legacy-local-rank": "launch",
    "ascend": "ascend",
}


def run_launcher(name, directory):
    """Start the check the way `name` does; return (results of every process we started,
    rank 0's report parsed from JSON, rank 1's own stdout or None when a launcher merges it)."""
    with Processes(directory) as procs:
        started = start(procs, name, DEVICEKIT, CHECK_ARGS, NPROC, directory)
        results = procs.finish_all(started, RUN_TIMEOUT_S)
    for result in results:
        assert result.returncode == 0, describe(results)
        assert "Traceback" not in result.stderr, describe(results)
    # The whole stdout of rank 0 (of the launcher, where ranks share it) must be one JSON
    # document: anything rank 1 printed there would make it fail to parse.
    try:
        report = json.loads(results[0].stdout)
    except json.JSONDecodeError as error:
        pytest.fail(f"stdout is not exactly one JSON report ({error})\n{describe(results)}")
    rank1_stdout = results[1].stdout if len(results) > 1 else None
    return results, report, rank1_stdout


@pytest.fixture(scope="module")
def launcher_runs(tmp_path_factory):
    """Each launcher's run, made once per module and shared by the tests that need it."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = run_launcher(name, tmp_path_factory.mktemp(name))
        return cache[name]

    return get


def correctness(report):
    """The part of a report that must not depend on how the ranks were started."""
    return {
        "ok": report["ok"],
        "world_size": report["world_size"],
        "nnodes": report["nnodes"],
        "backend": report["backend"],
        "device": report["device"],
        "checks": report["checks"],
        "ranks": [
            {key: entry[key] for key in ("rank", "local_rank", "ok")} for entry in report["ranks"]
        ],
    }


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_check_passes_under_launcher(launcher, launcher_runs):
    _results, report, rank1_stdout = launcher_runs(launcher)
    assert report["ok"] is True
    assert report["world_size"] == NPROC
    assert report["nnodes"] == 1
    assert report["backend"] == "gloo"
    assert report["device"] == "cpu"
    assert report["launcher"] == EXPECTED_MODE[launcher]
    assert report["checks"] == [
        "all_gather",
        "all_reduce_max",
        "all_reduce_sum",
        "barrier",
        "broadcast",
    ]
    assert [(e["rank"], e["local_rank"], e["ok"], e["failed"]) for e in report["ranks"]] == [
        (0, 0, True, []),
        (1, 1, True, []),
    ]
    sizes = [row["bytes"] for row in report["bandwidth"]]
    assert sizes and sizes[-1] <= MAX_BYTES and sizes == sorted(sizes)
    for row in report["bandwidth"]:
        assert row["time_us"] > 0 and row["algbw_gbps"] > 0 and row["busbw_gbps"] > 0, row
    if rank1_stdout is not None:  # ranks we started ourselves: rank 1 has its own stdout
        assert rank1_stdout == "", "only rank 0 may report"


@pytest.mark.slow
def test_every_launcher_reports_the_same_correctness(launcher_runs):
    reference = correctness(launcher_runs(LAUNCHERS[0])[1])
    for launcher in LAUNCHERS[1:]:
        assert correctness(launcher_runs(launcher)[1]) == reference, launcher


# -- failure paths ----------------------------------------------------------------------


@pytest.mark.slow
def test_a_rank_that_disagrees_fails_every_rank(tmp_path):
    with Processes(tmp_path) as procs:
        started = start(procs, "env", HELPER_DISAGREE, [], NPROC, tmp_path)
        results = procs.finish_all(started, RUN_TIMEOUT_S)
    for result in results:
        assert result.returncode not in (0, None), describe(results)
        assert result.returncode != 2, "a wrong result is not a usage error\n" + describe(results)
        assert "Traceback" not in result.stderr, describe(results)
    report = results[0].stdout
    assert report.startswith("devicekit check: FAILED: 2 ranks"), describe(results)
    assert re.search(r"^\s*rank\s+1 \(local 1\) .*: WRONG: all_reduce_sum$", report, re.M), report
    assert re.search(r"^\s*rank\s+0 \(local 0\) .*: ok$", report, re.M), report
    assert "busbw" not in report, "no timing after a wrong result"
    assert results[1].stdout == "", "only rank 0 may report"


@pytest.mark.slow
def test_master_port_in_use_is_one_clear_line(tmp_path):
    """Rank 0 of a 2-rank shell loop, alone: it binds the master port before it waits for
    anyone, so rank 1 (which would only connect to the holder) is not started."""
    rank0, _ = commands("env", DEVICEKIT, [*CHECK_ARGS, "--dist-timeout", "10"], NPROC, tmp_path)
    with taken_port() as port, Processes(tmp_path) as procs:
        proc = procs.start(rank0.name, rank0.argv, child_env(**{**rank0.env, "MASTER_PORT": port}))
        rank0 = procs.finish(proc, FAIL_TIMEOUT_S)
    assert rank0.returncode == 2, describe([rank0])
    assert "Traceback" not in rank0.stderr, describe([rank0])
    lines = rank0.stderr_lines()
    assert len(lines) == 1, describe([rank0])
    assert str(port) in lines[0] and "in use" in lines[0], lines[0]
    assert rank0.stdout == ""


@pytest.mark.slow
def test_a_rank_that_never_arrives_times_out(tmp_path):
    # Rank 0 of the shell loop alone.
    rank0, _ = commands("env", DEVICEKIT, [*CHECK_ARGS, "--dist-timeout", "5"], NPROC, tmp_path)
    with Processes(tmp_path) as procs:
        proc = procs.start(rank0.name, rank0.argv, child_env(**rank0.env))
        result = procs.finish(proc, FAIL_TIMEOUT_S)
    assert result.returncode == 2, describe([result])
    assert result.seconds < FAIL_TIMEOUT_S
    assert "Traceback" not in result.stderr, describe([result])
    lines = result.stderr_lines()
    assert len(lines) == 1, describe([result])
    assert "timeout" in lines[0].lower() and "5s" in lines[0], lines[0]
    assert result.stdout == ""


def test_check_refuses_a_single_rank():
    """`python -m devicekit check --nproc-per-node 1`, inside this process: devicekit's
    command line refuses it before any rank starts (with launch() recorded, in case it did
    not)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        devicekit_started_with(child_env()),
        mock.patch.object(check.devicekit, "launch") as launch,
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
        pytest.raises(SystemExit) as exited,
    ):
        devicekit_command.main([*CHECK_ARGS, "--nproc-per-node", "1"])
    assert exited.value.code == 2, stderr.getvalue()
    assert launch.call_args is None
    lines = stderr.getvalue().splitlines()
    assert len(lines) == 1, stderr.getvalue()
    assert "at least 2 ranks" in lines[0], lines[0]
    assert stdout.getvalue() == ""

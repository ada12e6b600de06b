"""An Ascend team's DDP training script, unchanged, on the npu stand-in: the script
(tests/npu_standin/ascend_ddp.py) imports torch_npu, never devicekit, and runs under
one `python -m devicekit simulate --devices 2 -- ...` started five ways at once: by
torchrun, by torch.distributed.launch, as one process, by its own mp.spawn, and by Ascend's
RANK_ID/RANK_SIZE shell loop (support/one_simulate.py: the command runs a shell that starts
them, each with its output of its own). HCCL_* variables are set in the command's
environment, as Ascend's launch scripts set them.

The runs start together in one module fixture (each costs about 10-20 s of CPU on 2 cores:
every process imports torch) and the tests read what they left.
"""

import json
import os
import re
import sys

import pytest
import torch

from conftest import clean_environ
from support.one_simulate import finished_command, start_under_one_simulate
from support.paths import TESTS
from support.processes import Processes, describe

pytestmark = pytest.mark.slow

SCRIPT = str(TESTS / "npu_standin" / "ascend_ddp.py")
TIMEOUT_S = 300  # all five runs together, the first build of the stand-in's extension included
HCCL = {"HCCL_CONNECT_TIMEOUT": "1200", "HCCL_EXEC_TIMEOUT": "1800", "HCCL_BUFFSIZE": "200"}
# Ascend's run_8p.sh: one rank per NPU, started in the background, RANK_ID/RANK_SIZE set.
SHELL_LOOP = """
export RANK_SIZE=2
for ((RANK_ID = 0; RANK_ID < RANK_SIZE; RANK_ID++)); do
    export RANK_ID
    "$PYTHON" "$SCRIPT" --output "$OUTPUT" &
done
wait
"""
TWO_RANKS = ("torchrun", "launch", "spawn", "shell_loop")
MODES = ("single", *TWO_RANKS)


def _free_port():
    # Imported here: importing devicekit before torch would switch torch's backend
    # autoload off for every later child (see conftest).
    from devicekit.environments import find_free_port

    return str(find_free_port())


def _command(mode, output):
    """(argv, extra environment) of one way to run SCRIPT, under the simulate command."""
    if mode == "torchrun":
        argv = ["torchrun", "--standalone", "--nproc-per-node", "2", SCRIPT]
        return [*argv, "--output", output], {}
    if mode == "launch":  # torch.distributed.launch: --local-rank=N after the script's own
        launch = [sys.executable, "-m", "torch.distributed.launch", "--nproc-per-node", "2"]
        return [*launch, "--master-port", _free_port(), SCRIPT, "--output", output], {}
    if mode == "single":
        return [sys.executable, SCRIPT, "--output", output], {}
    if mode == "spawn":
        argv = [sys.executable, SCRIPT, "--output", output, "--multiprocessing-distributed"]
        return argv, {"MASTER_PORT": _free_port()}
    assert mode == "shell_loop", mode
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": _free_port()}
    env.update(PYTHON=sys.executable, SCRIPT=SCRIPT, OUTPUT=output)
    return ["bash", "-c", SHELL_LOOP], env


class Run:
    """What one way of running the script left: its processes' output and its folder."""

    def __init__(self, finished, folder):
        self.finished, self.folder = finished, folder

    def reports(self):
        """{rank: what the rank reported}."""
        found = {}
        for path in self.folder.glob("rank*.json"):
            report = json.loads(path.read_text())
            found[report["rank"]] = report
        return found

    def weights(self):
        checkpoint = torch.load(self.folder / "checkpoint.pth", map_location="cpu")
        return checkpoint["state_dict"]

    def traces(self):
        return sorted((self.folder / "prof").glob("*.pt.trace.json"))


@pytest.fixture(scope="module")
def command(tmp_path_factory):
    """(the simulate command's Finished, {mode: Run}) of SCRIPT run each way, all at once
    under one `devicekit simulate` command; each must exit 0."""
    root = tmp_path_factory.mktemp("ascend_ddp")
    base = {key: value for key, value in clean_environ().items() if not key.startswith("HCCL_")}
    base.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **HCCL)
    commands = {}
    for mode in MODES:
        (root / mode).mkdir()
        commands[mode] = _command(mode, str(root / mode))
    with Processes(root / "processes") as procs:
        simulate = start_under_one_simulate(procs, commands, root, base)
        (finished,) = procs.finish_all([simulate], TIMEOUT_S)
    assert finished.returncode == 0, describe([finished])
    results = {mode: Run(finished_command(root, mode), root / mode) for mode in MODES}
    failed = [mode for mode, run in results.items() if run.finished.returncode != 0]
    assert not failed, f"{failed} failed:\n" + describe([results[m].finished for m in failed])
    return finished, results


@pytest.fixture(scope="module")
def runs(command):
    """{mode: Run}."""
    return command[1]


@pytest.mark.parametrize("mode", MODES)
def test_each_rank_trains_on_the_npu_its_launcher_gave_it(runs, mode):
    """Every rank's parameters are on npu:<its local rank> after training, with the rank
    and world size its launcher (or the script's mp.spawn) gave it."""
    run = runs[mode]
    world_size = 1 if mode == "single" else 2
    reports = run.reports()
    assert sorted(reports) == list(range(world_size)), describe([run.finished])
    for rank, report in reports.items():
        assert report["world_size"] == world_size, report
        assert report["local_rank"] == rank, report
        assert report["devices"] == [f"npu:{rank}"], report
        assert len(report["losses"]) == 48 // 8, report  # one epoch of global batches of 8


@pytest.mark.parametrize("mode", MODES)
def test_a_torch_npu_name_the_stand_in_lacks_is_absent_and_says_so(command, runs, mode):
    """hasattr() answers False, so a script's own fallback runs; using it says in one line
    that it needs a real NPU. The command's first line says what is not simulated."""
    for report in runs[mode].reports().values():
        assert report["has_grouped_matmul"] is False, report
        assert report["refused"] == (
            "torch_npu.npu_grouped_matmul is not provided by the npu stand-in: it needs a "
            "real Ascend NPU with torch_npu 2.13.0"
        ), report
    simulate, _ = command
    assert simulate.stderr_lines()[0] == (
        "devicekit simulate: 2 simulated NPU(s), npu:0 to npu:1, in every Python process of "
        "this command; NPU numerics and speed are not simulated"
    )
    assert "devicekit simulate" not in runs[mode].finished.stderr, runs[mode].finished.stderr


def test_every_two_rank_launch_ends_with_the_same_weights_bitwise(runs):
    """Same seed, same global batch at each step (the sampler's seeded shuffle, split
    between 2 ranks): torchrun, torch.distributed.launch, mp.spawn and the shell loop save
    identical checkpoints."""
    reference = runs["torchrun"].weights()
    assert sorted(reference) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    for mode in TWO_RANKS[1:]:
        weights = runs[mode].weights()
        assert sorted(weights) == sorted(reference)
        for name, value in reference.items():
            assert torch.equal(weights[name], value), f"{mode}: {name} differs from torchrun's"


def test_one_process_trains_on_the_same_global_batches(runs):
    """One process sees each step's 8 samples at once, where 2 ranks see 4 each and average
    their gradients: the same batches, summed in another order under fp16 autocast, so the
    weights agree to rounding (measured: 6e-5 at most; the same samples in another order
    of batches end 0.03 to 0.07 apart)."""
    single, reference = runs["single"].weights(), runs["torchrun"].weights()
    for name, value in reference.items():
        difference = (single[name] - value).abs().max().item()
        assert difference < 1e-3, f"{name}: one process ends {difference} from torchrun's"


@pytest.mark.parametrize("mode", MODES)
def test_the_profiler_leaves_a_trace_per_rank_that_tensorboard_opens(runs, mode):
    """torch_npu.profiler with schedule(wait=1, warmup=1, active=2) and
    tensorboard_trace_handler: one chrome trace per rank in the folder, `*.pt.trace.json`
    as TensorBoard's profiler plugin finds them, holding the two recorded steps and the
    operators they ran."""
    run = runs[mode]
    traces = run.traces()
    assert len(traces) == (1 if mode == "single" else 2), os.listdir(run.folder / "prof")
    for path in traces:
        assert re.fullmatch(r".+\.[0-9]+\.pt\.trace\.json", path.name), path.name
        events = json.loads(path.read_text())["traceEvents"]
        names = {event.get("name") for event in events}
        assert {"ProfilerStep#2", "ProfilerStep#3"} <= names, sorted(filter(None, names))
        assert "ProfilerStep#1" not in names and "ProfilerStep#4" not in names
        assert "aten::addmm" in names or "aten::mm" in names, sorted(filter(None, names))


@pytest.mark.parametrize("mode", MODES)
def test_hccl_variables_are_noted_once_and_ignored(command, runs, mode):
    """HCCL_CONNECT_TIMEOUT, HCCL_EXEC_TIMEOUT and HCCL_BUFFSIZE are taken: one line says
    they are ignored, however many processes the command starts (here all five ways' at
    once: none of them says it again), and the run trains."""
    simulate, _ = command
    lines = simulate.stderr_lines() + runs[mode].finished.stderr_lines()
    notes = [line for line in lines if "accepted and ignored" in line]
    assert notes == [
        "devicekit simulate: HCCL_BUFFSIZE, HCCL_CONNECT_TIMEOUT, HCCL_EXEC_TIMEOUT accepted "
        "and ignored: the stand-in's hccl runs on gloo, on the host, with no HCCL to tune"
    ], lines
    assert runs[mode].folder.joinpath("checkpoint.pth").is_file()

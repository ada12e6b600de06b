"""`devicekit.profile`: the device's profiler for any script, writing a trace that
TensorBoard's profiler view and Perfetto open. (torch_npu's profiler on an NPU:
tests/test_npu_simulated.py; the npu stand-in: tests/test_npu_standin.py.)"""

import json

import pytest
import torch

import devicekit
from devicekit import runtime


def train_steps(prof, steps):
    model = torch.nn.Linear(16, 4)
    for _ in range(steps):
        model(torch.randn(8, 16)).sum().backward()
        prof.step()


def test_a_plain_script_gets_a_trace_with_its_steps(tmp_path):
    runtime.kind("cpu")
    with devicekit.profile(tmp_path / "trace", wait=1, warmup=1, active=2) as prof:
        train_steps(prof, 5)
    [trace] = (tmp_path / "trace").glob("*.pt.trace.json")
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("name") == "aten::addmm" for e in events)
    assert sum(1 for e in events if e.get("name", "").startswith("ProfilerStep#")) == 2


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({"active": 0}, "active=0 must be an integer of at least 1"),
        ({"wait": -1}, "wait=-1 must be an integer of at least 0"),
        ({"warmup": 1.5}, "warmup=1.5 must be an integer of at least 0"),
    ],
)
def test_a_bad_schedule_is_named(tmp_path, kwargs, says):
    with pytest.raises(devicekit.UsageError, match=says):
        devicekit.profile(tmp_path, **kwargs)


def test_an_output_folder_that_cannot_be_made_is_named(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(devicekit.UsageError, match=r"cannot be made .*choose a writable folder"):
        devicekit.profile(tmp_path / "file" / "trace")
    assert not (tmp_path / "file" / "trace").exists()


@pytest.mark.parametrize("output_dir", [None, "", 3])
def test_an_output_folder_that_is_no_path_is_named(output_dir):
    with pytest.raises(devicekit.UsageError, match=r"output_dir=.* must name a folder"):
        devicekit.profile(output_dir)


def test_a_folder_that_cannot_hold_files_is_named():
    with pytest.raises(devicekit.UsageError, match=r"'/proc' cannot hold files \(.+\)"):
        devicekit.profile("/proc")


def test_a_run_shorter_than_the_schedule_is_told_why_nothing_was_recorded(tmp_path, capfd):
    runtime.kind("cpu")
    with devicekit.profile(tmp_path / "trace", wait=2, warmup=2, active=2) as prof:
        train_steps(prof, 3)
    assert not list((tmp_path / "trace").iterdir())
    said = [line for line in capfd.readouterr().err.splitlines() if "devicekit" in line]
    assert said == [
        f"devicekit: warning: devicekit.profile(): nothing was recorded in "
        f"'{tmp_path / 'trace'}': the run took 3 step(s) and recording starts after 4 "
        "(wait + warmup); call .step() after each training step, or lower wait and warmup"
    ]

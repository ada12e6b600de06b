"""The npu stand-in's torch_npu.profiler (devicekit/simulate/npu_profiler.py): torch_npu's
names and arguments on torch.profiler. It needs no npu device (it records the host), so it
runs in this process; tests/test_ascend_ddp.py runs it in an Ascend script under simulate.
"""

import json
import re

import pytest
import torch

from devicekit.simulate import npu_profiler as profiler

# torch's extension device is not renamed npu in this process (the stand-in is not active):
# torch says so of the NPU activity, which then records nothing more than the host.
pytestmark = pytest.mark.filterwarnings("ignore:The privateuseone is not a valid device option")

# The file names TensorBoard's profiler plugin (torch-tb-profiler) takes as one worker's
# trace: worker name, an optional span number, .pt.trace.json.
TRACE_NAME = re.compile(r"^(.*?)(\.\d+)?\.pt\.trace\.json(?:\.gz)?$")


def train(prof, steps):
    """`steps` small steps with `prof.step()` after each, as a training loop calls it."""
    weight = torch.ones(8, 8, requires_grad=True)
    for _ in range(steps):
        (weight @ weight).sum().backward()
        prof.step()


def step_names(path):
    """The ProfilerStep#N events of a chrome trace, and whether it holds torch's ops."""
    names = {event.get("name") for event in json.loads(path.read_text())["traceEvents"]}
    return sorted(n for n in names if str(n).startswith("ProfilerStep#")), "aten::mm" in names


@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")
@pytest.mark.parametrize(
    "arguments",
    [
        dict(wait=1, warmup=1, active=2),
        dict(wait=1, warmup=1, active=2, repeat=1),
        dict(wait=0, warmup=0, active=1, repeat=3),
        dict(wait=2, warmup=1, active=3, repeat=2, skip_first=3),
        dict(wait=2, warmup=1, active=3, repeat=0, skip_first=1, skip_first_wait=1),
    ],
)
def test_schedule_asks_at_each_step_what_torchs_asks(arguments):
    """torch_npu's schedule takes torch's arguments (`active` second when positional) and
    answers with torch_npu's ProfilerAction of the same name at every step."""
    ours = profiler.schedule(**arguments)
    torchs = torch.profiler.schedule(**arguments)
    assert [ours(step).name for step in range(30)] == [torchs(step).name for step in range(30)]
    assert isinstance(ours(0), profiler.ProfilerAction)
    assert profiler.schedule(1, 2)(1) is profiler.ProfilerAction.RECORD  # wait=1, active=2


def test_schedule_sets_an_argument_out_of_range_back_with_a_warning():
    """As torch_npu does: active=0 becomes 1 and wait=-1 becomes 0, each with a warning;
    a negative step is refused."""
    with pytest.warns(UserWarning) as warned:
        chosen = profiler.schedule(wait=-1, active=0)
    assert [str(w.message) for w in warned] == [
        "torch_npu.profiler.schedule: wait=-1 is not an int of at least 0; 0 is used",
        "torch_npu.profiler.schedule: active=0 is not an int of at least 1; 1 is used",
    ]
    assert (chosen.wait, chosen.active) == (0, 1)
    assert chosen(0) is profiler.ProfilerAction.RECORD_AND_SAVE
    with pytest.raises(ValueError, match="counted from 0, not -1"):
        chosen(-1)


# torch's own note on a second recording; each is written when it ends, before it is cleared.
@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events at the end of each cycle")
def test_each_recording_is_a_chrome_trace_tensorboard_finds(tmp_path):
    """An Ascend profiling loop: CPU and NPU activities, a schedule repeated twice, the
    experimental config Ascend scripts pass; one `<worker>.<ns>.pt.trace.json` per
    recording, holding its steps and the operators they ran."""
    config = profiler._ExperimentalConfig(
        export_type=profiler.ExportType.Text,
        profiler_level=profiler.ProfilerLevel.Level1,
        aic_metrics=profiler.AiCMetrics.PipeUtilization,
    )
    with profiler.profile(
        activities=[profiler.ProfilerActivity.CPU, profiler.ProfilerActivity.NPU],
        schedule=profiler.schedule(wait=1, warmup=1, active=2, repeat=2),
        on_trace_ready=profiler.tensorboard_trace_handler(str(tmp_path / "prof")),
        record_shapes=True,
        experimental_config=config,
    ) as prof:
        train(prof, 10)
    traces = sorted((tmp_path / "prof").iterdir())
    assert [TRACE_NAME.match(path.name) is not None for path in traces] == [True, True]
    assert [step_names(path) for path in traces] == [
        (["ProfilerStep#2", "ProfilerStep#3"], True),
        (["ProfilerStep#6", "ProfilerStep#7"], True),
    ]


def test_on_trace_ready_is_given_the_torch_npu_profile(tmp_path):
    """A handler of the user's own gets the object `with` gave, whose export_chrome_trace
    writes the recording; like torch_npu's, it has no key_averages() or events()."""
    seen = []

    def handler(prof):
        seen.append(prof)
        prof.export_chrome_trace(str(tmp_path / "own.json"))

    with profiler.profile(
        activities=[profiler.ProfilerActivity.CPU],
        schedule=profiler.schedule(wait=0, active=1, repeat=1),
        on_trace_ready=handler,
    ) as prof:
        train(prof, 2)
    assert seen == [prof]
    assert step_names(tmp_path / "own.json") == (["ProfilerStep#0"], True)
    assert not hasattr(prof, "key_averages") and not hasattr(prof, "events")


def test_without_analysis_nothing_is_written(tmp_path):
    """analyse_flag=False: torch_npu keeps only CANN's raw data, which the stand-in has
    not, so no trace is written."""
    with profiler.profile(
        schedule=profiler.schedule(wait=0, active=1, repeat=1),
        on_trace_ready=profiler.tensorboard_trace_handler(str(tmp_path), analyse_flag=False),
    ) as prof:
        train(prof, 2)
    assert list(tmp_path.iterdir()) == []


def test_the_default_folder_is_ascend_work_path_else_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for work_path, folder in [(None, tmp_path), (tmp_path / "work", tmp_path / "work")]:
        if work_path is None:
            monkeypatch.delenv("ASCEND_WORK_PATH", raising=False)
        else:
            monkeypatch.setenv("ASCEND_WORK_PATH", str(work_path))
            folder = work_path / "profiling_data"
        with profiler.profile(
            schedule=profiler.schedule(wait=0, active=1, repeat=1),
            on_trace_ready=profiler.tensorboard_trace_handler(worker_name="rank0"),
        ) as prof:
            train(prof, 1)
        assert [path.name.split(".")[0] for path in folder.glob("*.pt.trace.json")] == ["rank0"]


def test_activities_that_are_not_torch_npus_are_all_recorded_with_a_warning(tmp_path):
    """torch's own ProfilerActivity is not torch_npu's: as torch_npu does, both of its
    activities are recorded instead, and a warning says so."""
    with pytest.warns(UserWarning, match=r"are not all torch_npu.profiler.ProfilerActivity"):
        prof = profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    with prof:
        train(prof, 1)
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    assert step_names(tmp_path / "trace.json")[1]
    assert profiler.supported_activities() == set(profiler.ProfilerActivity)
    assert [activity.name for activity in profiler.ProfilerActivity] == ["CPU", "NPU"]

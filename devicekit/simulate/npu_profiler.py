"""`torch_npu.profiler` of the stand-in device: torch_npu's names and arguments on top of
torch.profiler (tests/test_npu_honesty.py compares them with torch-npu 2.13.0's).

The stand-in's kernels run on the host, so torch.profiler sees all there is: the operators
each step called on npu tensors (`aten::mm`, ...), with their shapes, memory and stacks when
asked. What an Ascend machine records besides, CANN's device timeline and the
`_ExperimentalConfig` it is tuned with (levels, AI Core metrics, L2 cache, mstx), has nothing
to measure here: the config is taken and not used.

Where the trace goes differs: `tensorboard_trace_handler` writes torch's layout, one
chrome-trace `<worker>.<ns>.pt.trace.json` per recording in its folder (TensorBoard's
profiler plugin, torch-tb-profiler, and Perfetto open it). torch_npu writes a folder
`<worker>_<pid>_<time>_ascend_pt` per recording, whose ASCEND_PROFILER_OUTPUT/trace_view.json
Ascend's plugin (torch-tb-profiler-ascend) reads.
"""

import collections.abc as _abc
import enum
import os
import socket
import time
import warnings
from typing import Any

import torch

# The environment variable and folder torch_npu writes to when no folder is given.
_WORK_PATH_ENV = "ASCEND_WORK_PATH"
_WORK_PATH_FOLDER = "profiling_data"


class ProfilerActivity(enum.Enum):
    """What a profile records: CPU, the host's operators, and NPU, the device's (torch's
    extension-device activity; on the stand-in its operators are the host's)."""

    CPU = 0
    NPU = 1


# torch's own activity for each: NPU is torch's extension device (PrivateUse1, named npu).
_TORCH_ACTIVITY = {
    ProfilerActivity.CPU: torch.profiler.ProfilerActivity.CPU,
    ProfilerActivity.NPU: torch.profiler.ProfilerActivity.PrivateUse1,
}


def supported_activities() -> set[ProfilerActivity]:
    """Both activities: the stand-in records the host for each."""
    return {ProfilerActivity.CPU, ProfilerActivity.NPU}


class ProfilerAction(enum.Enum):
    """What a schedule asks of the profiler at a step."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


class schedule:
    """Skip `skip_first` steps, then repeat `repeat` times (0: until the end) a cycle of
    `wait` idle steps, `warmup` steps and `active` recorded steps; the last active step
    saves the recording. `skip_first_wait` other than 0 leaves out the first cycle's wait.
    An argument out of range is set back to its default with a warning, as torch_npu does."""

    def __init__(
        self,
        wait: int,
        active: int,
        warmup: int = 0,
        repeat: int = 0,
        skip_first: int = 0,
        skip_first_wait: int = 0,
    ) -> None:
        self.wait = _at_least("wait", wait, 0, 0)
        self.active = _at_least("active", active, 1, 1)
        self.warmup = _at_least("warmup", warmup, 0, 0)
        self.repeat = _at_least("repeat", repeat, 0, 0)
        self.skip_first = _at_least("skip_first", skip_first, 0, 0)
        self.skip_first_wait = skip_first_wait if isinstance(skip_first_wait, int) else 0

    def __call__(self, step: int) -> ProfilerAction:
        if step < 0:
            raise ValueError(f"a profiler step is counted from 0, not {step}")
        step -= self.skip_first
        if step < 0:
            return ProfilerAction.NONE
        if self.skip_first_wait:
            step += self.wait
        cycle = self.wait + self.warmup + self.active
        if self.repeat and step // cycle >= self.repeat:
            return ProfilerAction.NONE
        within = step % cycle
        if within < self.wait:
            return ProfilerAction.NONE
        if within < self.wait + self.warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if within < cycle - 1 else ProfilerAction.RECORD_AND_SAVE


def _at_least(name: str, value: int, least: int, default: int) -> int:
    """`value` when it is an int of at least `least`; else `default`, with a warning."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= least:
        return value
    warnings.warn(
        f"torch_npu.profiler.schedule: {name}={value!r} is not an int of at least {least}; "
        f"{default} is used",
        stacklevel=3,
    )
    return default


class ProfilerLevel:
    """How much an Ascend profile collects (`_ExperimentalConfig(profiler_level=...)`)."""

    Level0 = "Level0"
    Level1 = "Level1"
    Level2 = "Level2"
    Level_none = "Level_none"


class AiCMetrics:
    """The AI Core counters an Ascend profile collects (`aic_metrics=...`)."""

    PipeUtilization = "ACL_AICORE_PIPE_UTILIZATION"
    ArithmeticUtilization = "ACL_AICORE_ARITHMETIC_UTILIZATION"
    Memory = "ACL_AICORE_MEMORY_BANDWIDTH"
    MemoryL0 = "ACL_AICORE_L0B_AND_WIDTH"
    MemoryUB = "ACL_AICORE_MEMORY_UB"
    ResourceConflictRatio = "ACL_AICORE_RESOURCE_CONFLICT_RATIO"
    L2Cache = "ACL_AICORE_L2_CACHE"
    MemoryAccess = "ACL_AICORE_MEMORY_ACCESS"
    AiCoreNone = "ACL_AICORE_NONE"


class ExportType:
    """What an Ascend profile is exported as (`export_type=...`)."""

    Db = "db"
    Text = "text"


class _Constant:
    """The defaults torch_npu writes as `Constant.<name>` in its signatures."""

    LEVEL0 = ProfilerLevel.Level0
    AicPipeUtilization = AiCMetrics.PipeUtilization


class _ExperimentalConfig:
    """The settings of CANN's side of an Ascend profile: taken, and not used, since the
    stand-in has no device timeline for them to shape."""

    # Named as torch_npu's signature names it, for the defaults below; not an attribute.
    Constant = _Constant

    def __init__(
        self,
        profiler_level: str = Constant.LEVEL0,
        aic_metrics: str = Constant.AicPipeUtilization,
        l2_cache: bool = False,
        msprof_tx: bool = False,
        mstx: bool = False,
        data_simplification: bool = True,
        record_op_args: bool = False,
        op_attr: bool = False,
        gc_detect_threshold: float | None = None,
        export_type: str | list[str] = ExportType.Text,
        host_sys: list[str] | None = None,
        mstx_domain_include: list[str] | None = None,
        mstx_domain_exclude: list[str] | None = None,
        sys_io: bool = False,
        sys_interconnection: bool = False,
    ) -> None:
        pass  # each setting tunes CANN's collection, which the stand-in has not

    del Constant


def _torch_activities(
    activities: _abc.Iterable[ProfilerActivity] | None,
) -> list[torch.profiler.ProfilerActivity]:
    """torch's activities for torch_npu's; all of them when none are given or one is not
    torch_npu's (with a warning, as torch_npu resets them)."""
    chosen = list(activities) if activities else list(ProfilerActivity)
    if not all(isinstance(activity, ProfilerActivity) for activity in chosen):
        warnings.warn(
            f"torch_npu.profiler.profile: activities={chosen!r} are not all "
            "torch_npu.profiler.ProfilerActivity.CPU or .NPU; both are recorded",
            stacklevel=3,
        )
        chosen = list(ProfilerActivity)
    return [_TORCH_ACTIVITY[activity] for activity in chosen]


class _KinetoProfile:
    """The methods torch_npu's profile takes from its _KinetoProfile, on torch's profiler."""

    _profiler: torch.profiler.profile

    def start(self) -> None:
        self._profiler.start()

    def stop(self) -> None:
        self._profiler.stop()

    def export_chrome_trace(self, output_path: str) -> None:
        """Write what was recorded as a chrome trace (JSON) to `output_path`."""
        self._profiler.export_chrome_trace(output_path)

    def add_metadata(self, key: str, value: str) -> None:
        self._profiler.add_metadata(key, value)

    def add_metadata_json(self, key: str, value: str) -> None:
        self._profiler.add_metadata_json(key, value)


class profile(_KinetoProfile):
    """torch_npu's profiler, used as a context manager with `step()` after each step; each
    recording the schedule saves is handed to `on_trace_ready` (`tensorboard_trace_handler`
    writes it to a folder). `experimental_config` is taken and not used."""

    def __init__(
        self,
        *,
        activities: _abc.Iterable[ProfilerActivity] | None = None,
        schedule: _abc.Callable[[int], ProfilerAction] | None = None,
        on_trace_ready: _abc.Callable[..., Any] | None = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
        experimental_config: _ExperimentalConfig | None = None,
        execution_trace_observer: torch.profiler.profiler._ITraceObserver | None = None,
        custom_trace_id_callback: _abc.Callable[[], str] | None = None,
        use_cuda: bool | None = None,
    ) -> None:
        if use_cuda is not None:
            warnings.warn(
                "torch_npu.profiler.profile: use_cuda has no effect on an NPU", stacklevel=2
            )
        self._profiler = torch.profiler.profile(
            activities=_torch_activities(activities),
            schedule=None if schedule is None else _torch_schedule(schedule),
            on_trace_ready=None if on_trace_ready is None else (lambda _: on_trace_ready(self)),
            record_shapes=record_shapes,
            profile_memory=profile_memory,
            with_stack=with_stack,
            with_flops=with_flops,
            with_modules=with_modules,
            execution_trace_observer=execution_trace_observer,
            custom_trace_id_callback=custom_trace_id_callback,
        )

    def __enter__(self) -> "profile":
        self.start()
        return self

    def __exit__(self, exe_type: object, exe_val: object, exc_tb: object) -> None:
        self.stop()

    def step(self) -> None:
        """Mark the end of a training step: the schedule moves on."""
        self._profiler.step()

    def set_custom_trace_id_callback(self, callback: _abc.Callable[[], str]) -> None:
        self._profiler.set_custom_trace_id_callback(callback)

    def get_trace_id(self) -> str:
        trace_id: str = self._profiler.get_trace_id()  # type: ignore[no-untyped-call]
        return trace_id


def _torch_schedule(
    chosen: _abc.Callable[[int], Any],
) -> _abc.Callable[[int], torch.profiler.ProfilerAction]:
    """torch's schedule for a torch_npu one (or torch's own): the same action, by name."""
    return lambda step: torch.profiler.ProfilerAction[chosen(step).name]


def tensorboard_trace_handler(
    dir_name: str | None = None,
    worker_name: str | None = None,
    analyse_flag: bool = True,
    async_mode: bool = False,
) -> _abc.Callable[[profile], None]:
    """What writes each recording of a profile to the folder `dir_name` (by default
    $ASCEND_WORK_PATH/profiling_data, else the working directory), as a chrome trace named
    `<worker_name>.<ns>.pt.trace.json` (by default `<host>_<pid>`). With `analyse_flag`
    False torch_npu keeps only CANN's raw data, which the stand-in has not: nothing is
    written. The trace is written at once (`async_mode` changes nothing)."""
    if dir_name is None:
        work_path = os.environ.get(_WORK_PATH_ENV)
        dir_name = os.path.join(work_path, _WORK_PATH_FOLDER) if work_path else os.getcwd()
    folder = dir_name

    def handler(prof: profile) -> None:
        if not analyse_flag:
            return
        os.makedirs(folder, exist_ok=True)
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        prof.export_chrome_trace(os.path.join(folder, f"{worker}.{time.time_ns()}.pt.trace.json"))

    return handler


__all__ = [
    "AiCMetrics",
    "ExportType",
    "ProfilerAction",
    "ProfilerActivity",
    "ProfilerLevel",
    "_ExperimentalConfig",
    "profile",
    "schedule",
    "supported_activities",
    "tensorboard_trace_handler",
]

"""The npu stand-in's `torch_npu.profiler`: torch_npu's profiler on torch.profiler, which
records the host, where the stand-in's kernels run (devicekit/simulate/npu_profiler.py)."""

from devicekit.simulate.npu_profiler import (
    AiCMetrics,
    ExportType,
    ProfilerAction,
    ProfilerActivity,
    ProfilerLevel,
    _ExperimentalConfig,
    profile,
    schedule,
    supported_activities,
    tensorboard_trace_handler,
)

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

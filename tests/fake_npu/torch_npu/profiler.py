"""The simulated torch_npu.profiler: the names and signatures of torch_npu 2.13.0's
(`profile`, `ProfilerActivity` with CPU and NPU, `schedule`, `tensorboard_trace_handler`).
Each call is recorded in torch_npu.CALLS; the recording itself is torch.profiler's, of the
host, since there is no NPU to record."""

import enum

import torch

from torch_npu import CALLS


class ProfilerActivity(enum.Enum):
    CPU = 0
    NPU = 1


def schedule(wait, active, warmup=0, repeat=0, skip_first=0, skip_first_wait=0):
    CALLS.append(
        ["profiler.schedule", {"wait": wait, "warmup": warmup, "active": active, "repeat": repeat}]
    )
    return torch.profiler.schedule(
        wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first
    )


def tensorboard_trace_handler(dir_name=None, worker_name=None, analyse_flag=True, async_mode=False):
    CALLS.append(["profiler.tensorboard_trace_handler", dir_name])
    return torch.profiler.tensorboard_trace_handler(dir_name, worker_name)


def profile(
    *,
    activities=None,
    schedule=None,
    on_trace_ready=None,
    record_shapes=False,
    profile_memory=False,
    with_stack=False,
    with_flops=False,
    with_modules=False,
    experimental_config=None,
    execution_trace_observer=None,
    custom_trace_id_callback=None,
    use_cuda=None,
):
    CALLS.append(["profiler.profile", sorted(a.name for a in activities or ())])
    return torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=schedule,
        on_trace_ready=on_trace_ready,
        record_shapes=record_shapes,
        profile_memory=profile_memory,
        with_stack=with_stack,
    )

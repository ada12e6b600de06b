"""The CPU: always present, one device, collectives over gloo."""

import os
import resource
from collections.abc import Mapping

import torch

from devicekit.kinds.base import DeviceKind


class CpuKind(DeviceKind):
    name = "cpu"
    default_backend = "gloo"
    accepted_backends = frozenset({"gloo"})
    backend_owner = "CPUs"
    default_amp_dtype = torch.bfloat16

    def probe(self) -> tuple[bool, str]:
        return True, ""

    def device_count(self) -> int:
        return 1

    def default_ranks_per_node(self) -> int:
        # Two ranks exercise the distributed path and split a small CPU's cores evenly.
        return min(2, len(os.sched_getaffinity(0)))

    def default_amp(self) -> bool:
        # bf16 autocast paid 1.3-1.5x in training on a CPU with native bf16 (avx512_bf16);
        # without native support it is emulated and slower.
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())

    def prefers_channels_last(self, amp: bool) -> bool:
        # Measured: channels_last helps oneDNN's bf16 convolutions, not fp32 ones.
        return amp

    def configure_host_threads(self, local_world_size: int, environ: Mapping[str, str]) -> int:
        # The ranks of a node share its cores: cores / ranks each, unless the user chose
        # (torchrun sets OMP_NUM_THREADS=1 when it starts several ranks and none was set).
        if "OMP_NUM_THREADS" in environ:
            return torch.get_num_threads()
        threads = max(1, len(os.sched_getaffinity(0)) // max(1, local_world_size))
        torch.set_num_threads(threads)
        return threads

    def memory_stats(self) -> dict[str, int]:
        # ru_maxrss is in KiB on Linux: the process's peak resident memory.
        return {"max_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}

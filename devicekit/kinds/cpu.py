"""The CPU: always present, one device, collectives over gloo."""

import os
import resource
from collections.abc import Mapping

import torch

from devicekit.errors import UsageError
from devicekit.kinds.base import DeviceKind

BF16_ENV = "DEVICEKIT_CPU_BF16"


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
        # Measured on ResNet training: bf16 autocast (with channels_last) paid 2.2x on a CPU
        # with avx512_bf16, and cost 2.2x on one with AVX-512 but no bf16 instructions, where
        # oneDNN emulates it; oneDNN's own check says yes to both.
        return computes_bf16_natively()

    def computes_bf16_natively(self) -> bool:
        return computes_bf16_natively()

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


def computes_bf16_natively() -> bool:
    """Whether this CPU has bf16 instructions (x86: avx512_bf16 or AMX; Arm: the BF16
    extension), not only a oneDNN that can emulate bf16 on AVX-512. DEVICEKIT_CPU_BF16=1 or
    0 answers instead: for a machine whose CPU flags a virtual machine hides, and to take
    either policy (bf16 autocast + channels_last, or fp32 NCHW) on any CPU."""
    told = os.environ.get(BF16_ENV, "").strip()
    if told:
        if told not in ("0", "1"):
            raise UsageError(
                f"{BF16_ENV}={told!r} is neither 1 nor 0: set 1 to treat this CPU as having "
                "bf16 instructions, 0 as not, or unset it to detect them"
            )
        return told == "1"
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return False
    capabilities = getattr(torch._C._cpu, "_get_cpu_capability", None)
    if capabilities is None:  # an older torch cannot tell: fp32 is never the slow choice
        return False
    found = capabilities()
    if found.get("architecture") != "x86_64":
        return True  # on Arm, oneDNN's check is the BF16 extension itself
    return bool(found.get("avx512_bf16") or found.get("amx_bf16"))

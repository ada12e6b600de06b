"""What a benchmark's figures were measured on: the CPU (model, family, the flags that
decide bf16 speed), cores, Python and torch. Shared by every benchmark here."""

import os
import platform

import torch

CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")


def cpu_and_versions():
    """A dict describing this machine's CPU and the versions that matter for speed."""
    cpuinfo = {}
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            cpuinfo.setdefault(key.strip(), value.strip())  # the first processor's
    flags = set(cpuinfo.get("flags", "").split())
    return {
        "cpu": cpuinfo.get("model name", platform.processor()),
        "cpu_family_model": f"family {cpuinfo.get('cpu family')} model "
        f"{cpuinfo.get('model')} stepping {cpuinfo.get('stepping')}",
        "flags": {flag: flag in flags for flag in CPU_FLAGS},
        "cores": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }

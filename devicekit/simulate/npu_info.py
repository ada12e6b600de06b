"""What the stand-in's torch.npu reports about a device: its properties, its free and total
memory, and the memory summary table.

A stand-in device's memory is host memory: with DEVICEKIT_SIMULATE_MEMORY set it holds that
many bytes, counted per device; without, it holds what the host has.
"""

import dataclasses
import os
import re
import uuid
import warnings
from pathlib import Path

_MEMINFO = Path("/proc/meminfo")
CAPABILITY_ENV = "TORCH_NPU_DEVICE_CAPABILITY"


def host_memory() -> tuple[int, int]:
    """(bytes the host can still give, bytes it has): Linux's MemAvailable, else the free
    pages, and the physical memory."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = page * os.sysconf("SC_PHYS_PAGES")
    try:
        for line in _MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, total
    except OSError:
        pass
    if "SC_AVPHYS_PAGES" in os.sysconf_names:
        return page * os.sysconf("SC_AVPHYS_PAGES"), total
    return total, total


def free_and_total(capacity: int, used: int) -> tuple[int, int]:
    """(free, total) bytes of a device holding `capacity` bytes (0: the host's memory) with
    `used` of them in npu tensors. Without a capacity, npu tensors are already part of what
    the host has given, so its figures stand as they are."""
    if capacity > 0:
        return max(capacity - used, 0), capacity
    return host_memory()


class _Uuid:
    """A device's UUID as torch_npu gives it: `.bytes` (16 ints), str() in 8-4-4-4-12 form."""

    def __init__(self, value: uuid.UUID) -> None:
        self._value = value

    @property
    def bytes(self) -> list[int]:
        return list(self._value.bytes)

    def __str__(self) -> str:
        return str(self._value)


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    """torch.npu.get_device_properties()'s answer, with the fields torch_npu 2.13.0's has.
    The ones torch_npu leaves None on an Ascend NPU (they describe CUDA and ROCm devices)
    are None here too."""

    name: str
    total_memory: int
    cube_core_num: int
    vector_core_num: int
    L2_cache_size: int  # torch_npu's name
    uuid: _Uuid
    major: None = None
    minor: None = None
    is_multi_gpu_board: None = None
    is_integrated: None = None
    multi_processor_count: None = None
    max_threads_per_multi_processor: None = None
    warp_size: None = None
    regs_per_multiprocessor: None = None
    gcnArchName: None = None  # torch_npu's name

    def __repr__(self) -> str:
        mib = 1024 * 1024
        return (
            f"_NPUDeviceProperties(name={self.name!r}, total_memory="
            f"{self.total_memory // mib}MB, cube_core_num={self.cube_core_num}, "
            f"vector_core_num={self.vector_core_num}, uuid={self.uuid}, "
            f"L2_cache_size={self.L2_cache_size // mib}MB)"
        )


def properties(name: str, index: int, total_memory: int, threads: int) -> DeviceProperties:
    """The properties of stand-in device `index`. Its kernels run on the host CPU's
    `threads` (both core counts say so), it has no cache of its own (L2 0), and its UUID is
    the same for that index in every process, different from any other index's."""
    return DeviceProperties(
        name=name,
        total_memory=total_memory,
        cube_core_num=threads,
        vector_core_num=threads,
        L2_cache_size=0,
        uuid=_Uuid(uuid.uuid5(uuid.NAMESPACE_URL, f"devicekit:npu-standin:{index}")),
    )


def _size(nbytes: int) -> str:
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.2f} {unit}"
        value /= 1024
    return f"{value:.2f} TiB"


def summary(index: int, current: int, peak: int, capacity: int) -> str:
    """torch.npu.memory_summary()'s table for device `index`: the bytes in its tensors now
    and at their peak, and what it holds. Reserved equals allocated: the stand-in has no
    caching allocator, and no pools to break the figures down by."""
    free, total = free_and_total(capacity, current)
    held = "DEVICEKIT_SIMULATE_MEMORY" if capacity > 0 else "the host's memory, no limit set"
    rows = [
        f"npu:{index} memory summary (devicekit stand-in: host memory, counted per device)",
        f"{'':<18}{'current':>14}{'peak':>14}",
        f"{'Allocated memory':<18}{_size(current):>14}{_size(peak):>14}",
        f"{'Reserved memory':<18}{_size(current):>14}{_size(peak):>14}",
        f"{'Free memory':<18}{_size(free):>14}",
        f"{'Total memory':<18}{_size(total):>14}  ({held})",
    ]
    width = max(len(row) for row in rows)
    rule = "|" + "=" * (width + 2) + "|"
    lines = [f"| {row:<{width}} |" for row in rows]
    return "\n".join([rule, lines[0], rule, *lines[1:], rule]) + "\n"


def capability() -> tuple[int, int] | None:
    """torch.npu.get_device_capability()'s answer, as torch_npu 2.13.0 gives it: None, or
    TORCH_NPU_DEVICE_CAPABILITY's "major.minor" as (major, minor), each with a warning that
    the figure is there for PyTorch's sake and says nothing of the device."""
    value = os.getenv(CAPABILITY_ENV)
    meaning = "it is there for PyTorch's sake and says nothing of the NPU"
    if not value:
        warnings.warn(
            f"torch.npu.get_device_capability() is None until {CAPABILITY_ENV} is set to "
            f"major.minor (e.g. 8.0); {meaning}",
            stacklevel=3,
        )
        return None
    found = re.match(r"^(\d+)\.(\d+)$", value)
    if not found:
        warnings.warn(
            f"{CAPABILITY_ENV}={value!r} is not major.minor, so "
            "torch.npu.get_device_capability() is None: write it as two whole numbers (8.0)",
            stacklevel=3,
        )
        return None
    warnings.warn(f"torch.npu.get_device_capability(): {meaning}", stacklevel=3)
    return int(found.group(1)), int(found.group(2))

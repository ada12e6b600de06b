"""`torch.npu` of the stand-in device: the names ordinary scripts and devicekit call, each
with the signature it has in torch_npu (tests/test_npu_honesty.py compares them).

The device's memory is host memory and its kernels are the CPU's, so there is nothing to
wait for, random numbers come from the CPU's generator, and the memory figures are 0.
"""

import collections
from typing import Literal

import torch

import devicekit.simulate.npu_amp as amp  # noqa: F401  (torch.npu.amp)
from devicekit.simulate.build import Extension as _Extension

# The stand-in models an Atlas A2 chip (bfloat16, binary kernels).
DEVICE_NAME = "Ascend910B4 (devicekit stand-in on the host CPU)"

_native: _Extension | None = None  # the compiled extension, set by devicekit.simulate.activate()
_Device = int | str | torch.device


def _index(device: _Device | None, optional: bool = False) -> int:
    """A device index from an int, "npu:1", torch.device or None (the current device)."""
    if device is None:
        return current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "npu":
            raise ValueError(f"Expected a npu device, but got: {device}")
        return current_device() if device.index is None else device.index
    index = int(device)
    if index < 0 and optional:
        return index
    if not 0 <= index < device_count():
        raise AssertionError(f"Invalid device id npu:{index}: {device_count()} visible")
    return index


def is_available() -> bool:
    return device_count() > 0


def _extension() -> _Extension:
    if _native is None:
        raise RuntimeError("the npu stand-in is not active: devicekit.simulate.activate() first")
    return _native


def device_count() -> int:
    return _extension().device_count()


def is_initialized() -> bool:
    return True


def _lazy_init() -> None:
    pass


def _is_in_bad_fork() -> bool:
    return False


def set_device(device: _Device) -> None:
    _extension().set_current_device(_index(device))


def current_device() -> int:
    return _extension().current_device()


def synchronize(device: _Device | None = None) -> None:
    _index(device)


def get_device_name(device_name: _Device | None = None) -> str:
    _index(device_name, optional=True)
    return DEVICE_NAME


def is_bf16_supported(including_emulation: bool = False) -> bool:
    return True


def set_compile_mode(jit_compile: bool = False) -> None:
    pass  # the kernels are the CPU's: there is nothing to compile


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16, torch.float32]


def is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled("npu")


class device:
    """Context manager that makes `device` the current npu device inside the block."""

    def __init__(self, device: _Device | None) -> None:
        self.idx = _index(device, optional=True)
        self.prev_idx = -1

    def __enter__(self) -> None:
        if self.idx >= 0:
            self.prev_idx = current_device()
            set_device(self.idx)

    def __exit__(self, *args: object) -> Literal[False]:
        if self.idx >= 0:
            set_device(self.prev_idx)
        return False


def manual_seed(seed: int) -> None:
    torch.default_generator.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    torch.default_generator.manual_seed(int(seed))


def seed() -> None:
    torch.default_generator.seed()


def initial_seed() -> int:
    return torch.default_generator.initial_seed()


def get_rng_state(device: int | str | torch.device = "npu") -> torch.Tensor:
    return torch.default_generator.get_state()


def set_rng_state(new_state: torch.Tensor, device: int | str | torch.device = "npu") -> None:
    torch.default_generator.set_state(new_state)


def empty_cache() -> None:
    pass


def memory_allocated(device: _Device | None = None) -> int:
    return 0


def max_memory_allocated(device: _Device | None = None) -> int:
    return 0


def memory_reserved(device: _Device | None = None) -> int:
    return 0


def max_memory_reserved(device: _Device | None = None) -> int:
    return 0


def reset_peak_memory_stats(device: _Device | None = None) -> None:
    pass


def memory_stats(device: _Device | None = None) -> collections.OrderedDict[str, int]:
    return collections.OrderedDict(
        (f"{name}.all.{which}", 0)
        for name in ("allocated_bytes", "reserved_bytes")
        for which in ("current", "peak")
    )


__all__: list[str] = [
    "current_device",
    "device",
    "device_count",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_name",
    "get_rng_state",
    "initial_seed",
    "is_autocast_enabled",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "set_compile_mode",
    "set_device",
    "set_rng_state",
    "synchronize",
]

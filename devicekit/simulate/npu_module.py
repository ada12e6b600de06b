"""`torch.npu` of the stand-in device: the names ordinary scripts and devicekit call, each
with the signature it has in torch_npu (tests/test_npu_honesty.py compares them).

The device's memory is host memory and its kernels are the CPU's, so there is nothing to
wait for (each stream and event is already complete) and random numbers come from the CPU's
generator (one for all devices). Its allocator counts the bytes of npu tensors per device,
so the memory figures are real (with no caching allocator, what it reserves is what tensors
hold); past DEVICEKIT_SIMULATE_MEMORY an allocation raises torch's OutOfMemoryError.
"""

import collections
import contextlib
import time
import warnings
from typing import Literal

import torch

import devicekit.simulate.npu_amp as amp  # noqa: F401  (torch.npu.amp)
from devicekit.simulate import npu_info as _info
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


def get_device_properties(device_name: _Device | None = None) -> _info.DeviceProperties:
    """Its name, total memory (the capacity, else the host's) and more: npu_info.properties."""
    index = _index(device_name)
    total = _info.free_and_total(_extension().capacity(), 0)[1]
    return _info.properties(DEVICE_NAME, index, total, torch.get_num_threads())


def get_device_capability(device: _Device | None = None) -> tuple[int, int] | None:
    # torch_npu 2.13.0's answer: None unless TORCH_NPU_DEVICE_CAPABILITY is set. Under
    # transfer_to_npu, dist.broadcast reads [0] of it for an npu tensor (is_cuda is is_npu):
    # a script failing on that None fails so on an Ascend NPU, and the variable fixes both.
    return _info.capability()


def utilization(device: _Device | None = None) -> int:
    """0 (%): each kernel runs to its end when called, so the device is idle when asked."""
    _index(device)
    return 0


def is_bf16_supported(including_emulation: bool = False) -> bool:
    return True


def set_compile_mode(jit_compile: bool = False) -> None:
    pass  # the kernels are the CPU's: there is nothing to compile


class _NpuConfig:
    """`torch.npu.config`: `torch.npu.config.allow_internal_format = False` asks torch_npu
    to keep tensors in the ND layout users see. The stand-in has no internal formats, so the
    setting changes nothing. As on torch_npu, settings are only written (reading one raises
    AttributeError) and a name it does not know is ignored."""

    def __setattr__(self, name: str, value: object) -> None:
        pass


config = _NpuConfig()


def set_option(option: dict[str, str]) -> None:
    """CANN's options (ACL_OP_SELECT_IMPL_MODE, NPU_FUZZY_COMPILE_BLACKLIST, ...): there is no
    CANN here, so they are taken and ignored; a value that is not a dict is refused as
    torch_npu refuses it."""
    if not isinstance(option, dict):
        raise TypeError("npu option must be a dict.")


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


def seed_all() -> None:
    torch.default_generator.seed()


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(index) for index in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def empty_cache() -> None:
    pass  # nothing is cached: memory goes back to the host when a tensor is freed


def memory_allocated(device: _Device | None = None) -> int:
    return _extension().memory_usage(_index(device))[0]


def max_memory_allocated(device: _Device | None = None) -> int:
    return _extension().memory_usage(_index(device))[1]


def memory_reserved(device: _Device | None = None) -> int:
    return _extension().memory_usage(_index(device))[0]


def max_memory_reserved(device: _Device | None = None) -> int:
    return _extension().memory_usage(_index(device))[1]


def reset_peak_memory_stats(device: _Device | None = None) -> None:
    _extension().reset_peak(_index(device))


def _renamed(old: str, new: str) -> None:
    # torch_npu's own deprecation of its CUDA-era names, which still work.
    warnings.warn(f"torch.npu.{old} is now torch.npu.{new}", DeprecationWarning, stacklevel=3)


def reset_max_memory_allocated(device: _Device | None = None) -> None:
    _renamed("reset_max_memory_allocated", "reset_peak_memory_stats (it resets every peak)")
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: _Device | None = None) -> None:
    _renamed("reset_max_memory_cached", "reset_peak_memory_stats (it resets every peak)")
    reset_peak_memory_stats(device)


def memory_cached(device: _Device | None = None) -> int:
    _renamed("memory_cached", "memory_reserved")
    return memory_reserved(device)


def max_memory_cached(device: _Device | None = None) -> int:
    _renamed("max_memory_cached", "max_memory_reserved")
    return max_memory_reserved(device)


def mem_get_info(device: _Device | None = None) -> tuple[int, int]:
    """(free, total) bytes: of the simulated capacity, else the host's memory."""
    index = _index(device)
    return _info.free_and_total(_extension().capacity(), memory_allocated(index))


def memory_summary(device: _Device | None = None, abbreviated: bool = False) -> str:
    """A table of the device's memory; the same with `abbreviated`, as there are no pools."""
    index = _index(device)
    current, peak = _extension().memory_usage(index)
    return _info.summary(index, current, peak, _extension().capacity())


def memory_stats(device: _Device | None = None) -> collections.OrderedDict[str, int]:
    current, peak = _extension().memory_usage(_index(device))
    return collections.OrderedDict(
        (f"{name}.all.{which}", value)
        for name in ("allocated_bytes", "reserved_bytes")
        for which, value in (("current", current), ("peak", peak))
    )


# -- streams and events: kernels run when they are called, so all are complete ---------------


class Stream(torch.Stream):
    """A stream of an npu device. The stand-in runs every kernel when it is called, so work
    on any stream is already done: waiting on one stream or event for another costs nothing."""

    def __new__(cls, device: _Device | None = None, priority: int = 0, **kwargs: int) -> "Stream":
        if kwargs:  # stream_id, device_index, device_type: a stream that exists
            return super().__new__(cls, priority=priority, **kwargs)
        return super().__new__(cls, device=torch.device("npu", _index(device)), priority=priority)


class Event(torch.Event):
    """An event of the current npu device, complete once recorded; with enable_timing it
    notes the host's clock then, when the work before it has run, as a device's would."""

    _timing: bool
    _recorded_at: float | None

    def __new__(
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> "Event":
        event = super().__new__(
            cls,
            device=torch.device("npu", current_device()),
            enable_timing=enable_timing,
            blocking=blocking,
            interprocess=interprocess,
        )
        event._timing, event._recorded_at = enable_timing, None
        return event

    def record(self, stream: torch.Stream | None = None) -> None:
        super().record(stream)
        if self._timing:
            self._recorded_at = time.perf_counter()

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Milliseconds from this event's record() to `end_event`'s."""
        end = end_event._recorded_at if isinstance(end_event, Event) else None
        if self._recorded_at is None or end is None:
            raise RuntimeError(
                "elapsed_time needs two events made with torch.npu.Event(enable_timing=True), "
                "each recorded: create both so and call record() on each first"
            )
        return (end - self._recorded_at) * 1000.0


def current_stream(device: _Device | None = None) -> Stream:
    return _the_stream(_index(device, optional=True))


def default_stream(device: _Device | None = None) -> Stream:
    return _the_stream(_index(device, optional=True))


def _the_stream(index: int) -> Stream:
    """The one stream of device `index` (the current device when negative)."""
    found = torch.accelerator.current_stream(current_device() if index < 0 else index)
    return Stream(
        stream_id=found.stream_id, device_index=found.device_index, device_type=found.device_type
    )


def stream(stream: Stream | None) -> contextlib.nullcontext[None]:
    # Selecting a stream changes nothing where every stream is already complete.
    return contextlib.nullcontext()


def set_stream(stream: Stream | None) -> None:
    if stream is not None:  # an npu stream; selecting it changes nothing, as above
        _index(stream.device)


def is_current_stream_capturing() -> bool:
    return False  # there are no graphs to capture (torch_npu.npu.graphs)


__all__: list[str] = [
    "Event",
    "Stream",
    "config",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "is_autocast_enabled",
    "is_available",
    "is_bf16_supported",
    "is_current_stream_capturing",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_cached",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_cached",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_compile_mode",
    "set_device",
    "set_option",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
    "utilization",
]

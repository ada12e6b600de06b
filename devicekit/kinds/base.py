"""The interface every device kind answers, and the accelerator behaviour written once."""

import abc
import os
import types
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any, Protocol

import torch

from devicekit.errors import UsageError

_DTYPES = {
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}
AMP_DTYPE_ENV = "DEVICEKIT_AMP_DTYPE"


class Profiler(Protocol):
    """What `DeviceKind.profiler()` returns: a context manager whose `step()` advances the
    schedule (torch.profiler.profile, or torch_npu's own profile class on an NPU)."""

    def __enter__(self) -> "Profiler": ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: types.TracebackType | None,
        /,
    ) -> bool | None: ...

    def step(self) -> None: ...


class DeviceKind(abc.ABC):
    """What devicekit knows about one kind of device.

    Subclasses set the class attributes and implement `probe` and `device_count`; the rest
    has defaults for a host-only kind. A kind is stateless: every answer is read from torch
    (and the environment) when asked.
    """

    name: str = ""  # the torch device type: "cuda", "npu", "cpu", ...
    default_backend: str = ""  # the collective backend where torch does not know the device
    accepted_backends: frozenset[str] = frozenset()
    backend_owner: str = ""  # who default_backend is for, as warnings name it ("NVIDIA GPUs")
    visible_devices_env: str | None = None
    is_accelerator: bool = False
    # NPUs (and CUDA) cannot be re-initialised in a forked child, so ranks are spawned.
    start_method: str = "spawn"
    default_amp_dtype: torch.dtype = torch.bfloat16
    install_hint: str = ""

    def __repr__(self) -> str:
        return f"<DeviceKind {self.name}>"

    # -- presence -------------------------------------------------------------------
    @abc.abstractmethod
    def probe(self) -> tuple[bool, str]:
        """Return (usable, reason): whether this kind can run here, and why not if it cannot."""

    def is_available(self) -> bool:
        """True when at least one device of this kind is usable in this process."""
        return self.probe()[0]

    def worth_a_warning_when_skipped(self) -> bool:
        """Whether auto-detection should say why it skipped this kind (its stack is installed)."""
        return False

    def visible_devices(self, environ: Mapping[str, str]) -> Sequence[int | str] | None:
        """The visible-devices list parsed and validated, or None when the variable is unset."""
        return None

    @abc.abstractmethod
    def device_count(self) -> int:
        """Devices of this kind this process may use (the visible-devices variable honoured)."""

    def default_ranks_per_node(self) -> int:
        """How many ranks a launcher starts per node when not told: one per device."""
        return self.device_count()

    # -- placement ------------------------------------------------------------------
    def device(self, index: int | None = None) -> torch.device:
        """The torch.device for local device `index` (or the kind's device when None)."""
        return torch.device(self.name) if index is None else torch.device(self.name, index)

    def set_device(self, index: int) -> None:
        """Make local device `index` this process's current device."""

    def configure_host_threads(
        self, local_world_size: int, environ: Mapping[str, str]
    ) -> int | None:
        """Set the host threads of one of `local_world_size` processes on this node; the
        number of compute threads when they do the training (CPU), else None."""
        return None

    def current_device(self) -> int:
        """The index of this process's current device (0 where there is only one)."""
        return 0

    def synchronize(self) -> None:
        """Wait for all queued work on the current device."""

    def manual_seed(self, seed: int) -> None:
        """Seed the random generator of the current device."""
        torch.default_generator.manual_seed(int(seed))

    def manual_seed_all(self, seed: int) -> None:
        """Seed the random generators of every device of this kind."""
        torch.default_generator.manual_seed(int(seed))

    def empty_cache(self) -> None:
        """Give cached, unused device memory back (no-op without a caching allocator)."""

    def memory(self, statistic: str) -> int:
        """A device allocator figure in bytes: "memory_allocated", "max_memory_allocated",
        "memory_reserved" or "max_memory_reserved" (0 without a device allocator)."""
        return 0

    def reset_peak_memory_stats(self) -> None:
        """Start the max_memory_* figures afresh."""

    def memory_stats(self) -> dict[str, int]:
        """A small dict of memory figures in bytes for the current device."""
        return {}

    def ddp_device_ids(self, index: int) -> list[int] | None:
        """The `device_ids` argument DistributedDataParallel wants for local device `index`."""
        return [index] if self.is_accelerator else None

    @property
    def pin_memory(self) -> bool:
        """Whether DataLoader should pin host memory for copies to this kind."""
        return self.is_accelerator

    # -- collectives ----------------------------------------------------------------
    def prepare_process_group(self, timeout_s: float, environ: MutableMapping[str, str]) -> None:
        """Adjust the backend's own variables before a process group with `timeout_s` starts."""

    @property
    def backend(self) -> str:
        """The collective backend for this kind, as torch maps it when it knows the device."""
        try:
            from torch.distributed import get_default_backend_for_device

            return get_default_backend_for_device(self.name)
        except (ImportError, RuntimeError, ValueError):
            return self.default_backend

    # -- mixed precision ------------------------------------------------------------
    def amp_dtype(self, requested: str | torch.dtype | None = None) -> torch.dtype:
        """The low-precision dtype autocast uses: `requested` ("float16"/"bfloat16"), else
        DEVICEKIT_AMP_DTYPE's, else the kind's default."""
        if requested is None:
            told = os.environ.get(AMP_DTYPE_ENV, "").strip()
            if not told:
                return self.default_amp_dtype
            if told.lower() not in _DTYPES:
                raise UsageError(
                    f"{AMP_DTYPE_ENV}={told!r} is not an AMP dtype: set float16 or bfloat16, "
                    f"or unset it for the {self.name} default"
                )
            return _DTYPES[told.lower()]
        if isinstance(requested, torch.dtype):
            return requested
        try:
            return _DTYPES[str(requested).lower()]
        except KeyError:
            raise UsageError(f"unknown AMP dtype {requested!r}: use float16 or bfloat16") from None

    def default_amp(self) -> bool:
        """Whether mixed precision is on when the user does not say (where it was measured
        to pay on this kind)."""
        return False

    def prefers_channels_last(self, amp: bool) -> bool:
        """Whether channels_last memory format is faster here (with or without AMP)."""
        return False

    def compile_backend(self) -> str | None:
        """The torch.compile backend this kind's stack compiles with, or None where it has
        no compiler (`no_compiler_reason` says why)."""
        return "inductor"

    def no_compiler_reason(self) -> str:
        """Why `compile_backend` is None here, in a few words."""
        return f"torch.compile has no backend for {self.name} here"

    @property
    def autocast_device_type(self) -> str:
        """The device type torch.autocast takes for this kind."""
        return self.name

    def grad_scaler(self, enabled: bool, **kwargs: Any) -> torch.amp.GradScaler:
        """A GradScaler for this kind (a no-op one when not `enabled`)."""
        return torch.amp.GradScaler(self.name, enabled=enabled, **kwargs)

    def needs_grad_scaler(self, dtype: torch.dtype) -> bool:
        """float16 gradients underflow without loss scaling; bfloat16 keeps fp32's range."""
        return dtype == torch.float16

    def is_bf16_supported(self) -> bool:
        """Whether bfloat16 tensors and autocast work here (torch's CPU kernels have them)."""
        return True

    def computes_bf16_natively(self) -> bool:
        """Whether bfloat16 is a fast precision here, not only a working one: what `shard()`
        keeps its parameters in when not told (an accelerator with bf16 says yes)."""
        return self.is_accelerator and self.is_bf16_supported()

    # -- profiling ------------------------------------------------------------------
    profiler_activities: tuple[str, ...] = ("CPU",)  # torch.profiler.ProfilerActivity's

    def profiler(
        self, output_dir: str, wait: int, warmup: int, active: int, repeat: int, **options: Any
    ) -> Profiler:
        """torch.profiler over this kind's activities on a `wait/warmup/active` schedule,
        writing a trace (TensorBoard's profiler view and Perfetto open it) to `output_dir`."""
        activities = [
            getattr(torch.profiler.ProfilerActivity, name) for name in self.profiler_activities
        ]
        return torch.profiler.profile(
            activities=activities,
            on_trace_ready=torch.profiler.tensorboard_trace_handler(output_dir),
            schedule=torch.profiler.schedule(
                wait=wait, warmup=warmup, active=active, repeat=repeat
            ),
            **options,
        )


class AcceleratorKind(DeviceKind):
    """An accelerator driven through its torch device module (`torch.get_device_module`:
    torch.cuda, torch.xpu, or torch.npu once torch_npu registered it), whose presence
    `torch.accelerator` reports. A kind of this sort names itself and its hints; the
    device calls, presence and memory figures are all here.
    """

    is_accelerator = True
    default_amp_dtype = torch.float16
    display_name: str = ""  # in "this torch has no CUDA support"
    device_noun: str = ""  # in "no GPU is visible"
    check_hint: str = ""  # what to look at when none is visible

    @property
    def module(self) -> types.ModuleType:
        """The torch device module (`torch.cuda`, `torch.npu`, ...)."""
        module: types.ModuleType = torch.get_device_module(self.name)
        return module

    @staticmethod
    def accelerator_type() -> str | None:
        """The accelerator this torch was built for, as torch.accelerator says, or None."""
        accelerator = torch.accelerator.current_accelerator()
        return None if accelerator is None else accelerator.type

    def probe(self) -> tuple[bool, str]:
        # Ask torch.accelerator, not the module's is_available(): torch_npu's
        # transfer_to_npu shim patches torch.cuda.is_available() to report True on an NPU
        # machine.
        found = self.accelerator_type()
        if found != self.name:
            return False, (
                f"this torch has no {self.display_name} support "
                f"(torch.accelerator reports {found}); {self.install_hint}"
            )
        self.visible_devices(os.environ)
        if self.module.device_count() == 0:
            var = self.visible_devices_env
            shown = "" if var is None else f" ({var}={os.environ.get(var)!r})"
            return False, f"no {self.device_noun} is visible{shown}; {self.check_hint}"
        return True, ""

    def device_count(self) -> int:
        if self.accelerator_type() != self.name:
            return 0
        count: int = self.module.device_count()
        return count

    def set_device(self, index: int) -> None:
        self.module.set_device(index)

    def current_device(self) -> int:
        index: int = self.module.current_device()
        return index

    def synchronize(self) -> None:
        self.module.synchronize()

    def manual_seed(self, seed: int) -> None:
        self.module.manual_seed(int(seed))

    def manual_seed_all(self, seed: int) -> None:
        self.module.manual_seed_all(int(seed))

    def empty_cache(self) -> None:
        self.module.empty_cache()

    def memory(self, statistic: str) -> int:
        figure: int = getattr(self.module, statistic)()
        return figure

    def reset_peak_memory_stats(self) -> None:
        self.module.reset_peak_memory_stats()

    def is_bf16_supported(self) -> bool:
        return bool(self.module.is_bf16_supported())

    def memory_stats(self) -> dict[str, int]:
        module = self.module
        return {
            "allocated": module.memory_allocated(),
            "max_allocated": module.max_memory_allocated(),
            "reserved": module.memory_reserved(),
        }

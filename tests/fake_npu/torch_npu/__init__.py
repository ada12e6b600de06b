"""A simulated torch_npu for devicekit's tests (never installed, only put on sys.path).

On import it does what the real torch_npu 2.13.0 does that devicekit relies on:

- renames PyTorch's PrivateUse1 device to ``npu``;
- registers ``torch.npu`` as the npu device module;
- registers the ``hccl`` collective backend for the ``npu`` device, so
  ``torch.distributed.get_default_backend_for_device("npu")`` answers ``hccl``.

The device functions record every call in :data:`CALLS` as ``[name, *args]``, so a test
can tell whether devicekit touched the NPU runtime. The simulated machine is set by the
environment:

- ``FAKE_NPU_COUNT``: physical NPUs (default 8);
- ``ASCEND_RT_VISIBLE_DEVICES``: honoured like the Ascend runtime does it: ids are
  re-indexed from 0, invalid or out-of-range ids are dropped silently, and an unordered
  list leaves no device at all;
- ``FAKE_NPU_IMPORT_ERROR``: when set, importing this package raises ImportError with
  that text (e.g. the loader's "libhccl.so: cannot open shared object file ...");
- ``FAKE_NPU_NAME``: what ``get_device_name()`` answers (default ``Ascend910B3``, an
  Atlas A2 chip).

Mixed precision is there as torch_npu 2.13.0 has it: ``get_amp_supported_dtype`` (which
``torch.autocast("npu")`` requires of the device module) and ``amp.GradScaler``, a
subclass of torch.amp.GradScaler with torch_npu's signature (``dynamic=``, no device).

These registrations are process-global and cannot be undone: import this module only in
a subprocess.
"""

import os
import types

if os.environ.get("FAKE_NPU_IMPORT_ERROR"):
    raise ImportError(os.environ["FAKE_NPU_IMPORT_ERROR"])

import torch
import torch.distributed

__version__ = "2.13.0"

# Every call into the simulated device module, in order: [name, *args].
CALLS = []

_current = [0]


def _visible_count():
    """The device count the Ascend runtime would report for this environment."""
    physical = int(os.environ.get("FAKE_NPU_COUNT", "8"))
    value = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    if value is None:
        return physical
    ids = []
    for entry in value.split(","):
        entry = entry.strip()
        if not entry.isdigit() or int(entry) >= physical:
            continue  # dropped silently, as the runtime does
        ids.append(int(entry))
    if ids != sorted(ids):
        return 0  # an unordered list makes the runtime report no NPU
    return len(ids)


def _recorded(func):
    """Wrap a device function so each call is appended to CALLS."""

    def wrapper(*args, **kwargs):
        CALLS.append([func.__name__, *args, *([kwargs] if kwargs else [])])
        return func(*args, **kwargs)

    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    return wrapper


@_recorded
def is_available():
    """Whether any NPU is visible."""
    return _visible_count() > 0


@_recorded
def device_count():
    """Visible NPUs (ASCEND_RT_VISIBLE_DEVICES honoured)."""
    return _visible_count()


@_recorded
def set_device(index):
    """Make NPU `index` current; out-of-range indices fail like the runtime's error 207004."""
    if not 0 <= index < _visible_count():
        raise RuntimeError(f"set_device: invalid device {index} (error code 207004)")
    _current[0] = index


@_recorded
def current_device():
    """The current NPU index."""
    return _current[0]


@_recorded
def synchronize(device=None):
    """Wait for queued work (there is none)."""


@_recorded
def memory_allocated(device=None):
    """Bytes held by tensors (always 0 here)."""
    return 0


@_recorded
def max_memory_allocated(device=None):
    """Peak bytes held by tensors (always 0 here)."""
    return 0


@_recorded
def memory_reserved(device=None):
    """Bytes held by the caching allocator (always 0 here)."""
    return 0


@_recorded
def get_device_name(device=None):
    """The chip's name, as the runtime reports it (e.g. Ascend910B3, Ascend910_9391)."""
    return os.environ.get("FAKE_NPU_NAME", "Ascend910B3")


@_recorded
def set_compile_mode(jit_compile=False):
    """Choose kernels compiled on line (True) or the binary ones (False)."""


@_recorded
def is_jit_compile_false():
    """The real one initialises the device to answer; devicekit must not call it."""
    return True


def get_amp_supported_dtype():
    """The dtypes autocast may use on this chip."""
    return [torch.float16, torch.bfloat16, torch.float32]


class GradScaler(torch.amp.grad_scaler.GradScaler):
    """torch_npu's GradScaler: torch's, with `dynamic` (static loss scale when False)."""

    def __init__(
        self,
        init_scale=2.0**16,
        growth_factor=2.0,
        backoff_factor=0.5,
        growth_interval=2000,
        dynamic=True,
        enabled=True,
    ):
        CALLS.append(
            ["amp.GradScaler", {"init_scale": init_scale, "dynamic": dynamic, "enabled": enabled}]
        )
        super().__init__("npu", init_scale, growth_factor, backoff_factor, growth_interval, enabled)
        self.dynamic = dynamic


npu = types.ModuleType("torch_npu.npu", "The simulated torch.npu device module.")
for _func in (
    is_available,
    device_count,
    set_device,
    current_device,
    synchronize,
    memory_allocated,
    max_memory_allocated,
    memory_reserved,
    get_device_name,
    set_compile_mode,
    is_jit_compile_false,
    get_amp_supported_dtype,
):
    setattr(npu, _func.__name__, _func)
npu.amp = types.ModuleType("torch_npu.npu.amp", "The simulated torch.npu.amp.")
npu.amp.GradScaler = GradScaler
npu.CALLS = CALLS


def _new_process_group_hccl(options, backend_options):
    """Stands in for the HCCL process-group creator: a gloo group underneath, which serves
    the barrier a group's setup and teardown need (the tests run no NPU collectives)."""
    CALLS.append(["new_hccl_group", options.group_size])
    return torch.distributed.ProcessGroupGloo(
        options.store, options.group_rank, options.group_size, options.timeout
    )


torch.utils.rename_privateuse1_backend("npu")
torch._register_device_module("npu", npu)
torch.distributed.Backend.register_backend(
    "hccl", _new_process_group_hccl, extended_api=True, devices=["npu"]
)

"""The registry of device kinds. Adding a kind means one module and one entry here."""

from devicekit.errors import UsageError
from devicekit.kinds.base import AcceleratorKind, DeviceKind
from devicekit.kinds.cpu import CpuKind
from devicekit.kinds.cuda import CudaKind
from devicekit.kinds.npu import NpuKind

# Auto-detection tries the kinds in this order: NPU before CUDA, because torch_npu's
# transfer_to_npu shim makes CUDA look present on an NPU machine.
_REGISTRY = {kind.name: kind for kind in (NpuKind(), CudaKind(), CpuKind())}

ALIASES = {"gpu": "cuda"}


def names():
    """The registered kind names, in auto-detection order."""
    return list(_REGISTRY)


def get(name):
    """The DeviceKind called `name` (aliases such as "gpu" accepted)."""
    key = ALIASES.get(str(name).lower(), str(name).lower())
    try:
        return _REGISTRY[key]
    except KeyError:
        choices = ", ".join(names() + list(ALIASES) + ["auto"])
        raise UsageError(f"unknown device {name!r}: choose one of {choices}") from None


__all__ = ["AcceleratorKind", "DeviceKind", "get", "names", "ALIASES"]

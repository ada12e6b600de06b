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


def device_choices():
    """Every name a user may choose a kind by: "auto", the kinds, their aliases."""
    return ["auto"] + names() + list(ALIASES)


def get(name, label=None):
    """The DeviceKind called `name` (aliases such as "gpu" accepted); `label` says where
    the name came from in the error for an unknown one."""
    key = ALIASES.get(str(name).lower(), str(name).lower())
    try:
        return _REGISTRY[key]
    except KeyError:
        choices = ", ".join(device_choices())
        raise UsageError(f"{label or repr(name)}: unknown device {name!r}: choose one of "
                         f"{choices}") from None


__all__ = ["AcceleratorKind", "DeviceKind", "device_choices", "get", "names", "ALIASES"]

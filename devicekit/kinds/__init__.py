"""The registry of device kinds. Adding a kind means one module and one entry here, or a
`register_kind()` call from the user's own code (docs/extending.md). Which kind a process
runs on is resolved in devicekit.kinds.resolve."""

from devicekit.errors import UsageError
from devicekit.kinds.base import AcceleratorKind, DeviceKind
from devicekit.kinds.cpu import CpuKind
from devicekit.kinds.cuda import CudaKind
from devicekit.kinds.npu import NpuKind
from devicekit.kinds.xpu import XpuKind

# Auto-detection tries the kinds in this order: NPU before CUDA, because torch_npu's
# transfer_to_npu shim makes CUDA look present on an NPU machine; the CPU, always usable,
# last.
_REGISTRY: dict[str, DeviceKind] = {
    kind.name: kind for kind in (NpuKind(), CudaKind(), XpuKind(), CpuKind())
}

ALIASES = {"gpu": "cuda"}


def names() -> list[str]:
    """The registered kind names, in auto-detection order."""
    return list(_REGISTRY)


def device_choices() -> list[str]:
    """Every name a user may choose a kind by: "auto", the kinds, their aliases."""
    return ["auto"] + names() + list(ALIASES)


def get(name: str, label: str | None = None) -> DeviceKind:
    """The DeviceKind called `name` (aliases such as "gpu" accepted); `label` says where
    the name came from in the error for an unknown one."""
    key = ALIASES.get(str(name).lower(), str(name).lower())
    try:
        return _REGISTRY[key]
    except KeyError:
        choices = ", ".join(device_choices())
        raise UsageError(
            f"{label or repr(name)}: unknown device {name!r}: choose one of {choices}"
        ) from None


def register_kind(kind: DeviceKind, *, before: str | None = None) -> None:
    """Add a device kind of your own, tried by auto-detection just before `before` (a
    registered name; default: before "cpu", the fallback that ends auto-detection).

    Ranks that devicekit.launch() spawns look the kind up by name in a fresh interpreter:
    call this at import time of your script (module level, not under
    `if __name__ == "__main__":`) so that it runs there too. Registering the same class
    again changes nothing.
    """
    if not isinstance(kind, DeviceKind):
        raise TypeError(f"register_kind() takes a devicekit DeviceKind, not {kind!r}")
    name = kind.name
    if not name or name != name.lower() or name == "auto" or name in ALIASES:
        raise UsageError(
            f"register_kind(): {type(kind).__name__}.name={name!r} must be a "
            f"lower-case device type other than auto and {', '.join(ALIASES)}"
        )
    if name in _REGISTRY:
        if type(_REGISTRY[name]) is type(kind):
            return
        raise UsageError(
            f"register_kind(): a device kind named {name!r} is registered "
            f"already ({type(_REGISTRY[name]).__name__})"
        )
    before = "cpu" if before is None else before
    if before not in _REGISTRY:
        raise UsageError(
            f"register_kind(before={before!r}): no such kind; choose one of {', '.join(names())}"
        )
    entries = list(_REGISTRY.items())
    at = names().index(before)
    _REGISTRY.clear()
    _REGISTRY.update(entries[:at] + [(name, kind)] + entries[at:])


def backend_owner(backend: str) -> str | None:
    """Who a collective backend is for ("NVIDIA GPUs" for nccl), or None when no
    registered kind uses it."""
    return next(
        (kind.backend_owner for kind in _REGISTRY.values() if kind.default_backend == backend), None
    )


__all__ = [
    "ALIASES",
    "AcceleratorKind",
    "DeviceKind",
    "backend_owner",
    "device_choices",
    "get",
    "names",
    "register_kind",
]

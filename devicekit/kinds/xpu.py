"""Intel GPUs through torch.xpu (torch's XPU build), collectives over XCCL.

ZE_AFFINITY_MASK, Level Zero's visible-devices variable, lists devices (`0,1`) or tiles of
a device (`0.0,0.1`); it is checked before any device call.
"""

import re
from collections.abc import Mapping

from devicekit.errors import UsageError
from devicekit.kinds.base import AcceleratorKind
from devicekit.kinds.visible import check_distinct, is_device_id, split_entries

_ENTRY = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9})?")


def parse_affinity_mask(var: str, value: str) -> list[int | str]:
    """Parse ZE_AFFINITY_MASK: distinct device ids (`0`) or tiles (`0.1`)."""
    entries = split_entries(var, value)
    for entry in entries:
        if not _ENTRY.fullmatch(entry):
            raise UsageError(
                f"{var}={value!r}: {entry!r} is not a device (N) or a tile of "
                f"one (N.M); Level Zero then hides devices. Use e.g. {var}=0,1"
            )
    check_distinct(var, value, entries)
    return [int(entry) if is_device_id(entry) else entry for entry in entries]


class XpuKind(AcceleratorKind):
    name = "xpu"
    default_backend = "xccl"
    accepted_backends = frozenset({"xccl", "gloo"})
    backend_owner = "Intel GPUs"
    visible_devices_env: str = "ZE_AFFINITY_MASK"
    display_name, device_noun = "XPU", "Intel GPU"
    install_hint = "install torch's XPU build (see pytorch.org, 'Intel GPU')"
    check_hint = "check `xpu-smi discovery` (or `sycl-ls`) and the variable"

    def visible_devices(self, environ: Mapping[str, str]) -> list[int | str] | None:
        value = environ.get(self.visible_devices_env)
        return None if value is None else parse_affinity_mask(self.visible_devices_env, value)

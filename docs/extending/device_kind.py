"""A worked example of a device kind: Moore Threads GPUs (MUSA) through torch_musa, which
devicekit does not know yet.

torch_musa, once imported, registers the device type "musa" with torch (and so with
torch.accelerator); its collectives are MCCL's, and MUSA_VISIBLE_DEVICES narrows the
visible GPUs. An accelerator of that sort is an AcceleratorKind (devicekit/kinds/base.py):
presence, device calls, memory figures, DDP's device_ids, autocast's device type and the
GradScaler are written once there, over torch.get_device_module(name) and
torch.accelerator. The kind names itself and its hints, and parses its visible-devices
variable; this one also imports torch_musa when asked whether it can run, as the NPU kind
imports torch_npu. (A device unlike that subclasses DeviceKind and implements probe() and
device_count(), as devicekit/kinds/cpu.py does.)

Device kinds are the one kind of plugin that stays a class: scripts register their own.
Two ways to add this one:
- in devicekit: this class in devicekit/kinds/musa.py, and `MusaKind()` in the tuple that
  fills _REGISTRY in devicekit/kinds/__init__.py, at its place in auto-detection order;
- from a script, without editing devicekit: the class and the register_kind() line at the
  end of this file, at module level (the ranks devicekit.launch() spawns re-import the
  script's module and must register it too).
tests/test_kinds.py imports this file, which registers the kind, and resolves it.
"""

import importlib
from collections.abc import Mapping

import devicekit
from devicekit.errors import UsageError
from devicekit.kinds import AcceleratorKind
from devicekit.kinds.visible import check_distinct, is_device_id, split_entries


def parse_musa_visible(var: str, value: str) -> list[int]:
    """MUSA_VISIBLE_DEVICES as distinct device ids (`0,1`), checked before any device call."""
    entries = split_entries(var, value)
    for entry in entries:
        if not is_device_id(entry):
            raise UsageError(
                f"{var}={value!r}: {entry!r} is not a device id; use non-negative integers "
                f"separated by commas, e.g. {var}=0,1"
            )
    check_distinct(var, value, entries)
    return [int(entry) for entry in entries]


class MusaKind(AcceleratorKind):
    """Moore Threads GPUs through torch_musa, collectives over MCCL."""

    name = "musa"  # torch's device type
    default_backend = "mccl"  # the collective backend where torch does not map the device
    accepted_backends = frozenset({"mccl", "gloo"})
    backend_owner = "Moore Threads GPUs"  # as warnings name them ("mccl is for ...")
    visible_devices_env: str = "MUSA_VISIBLE_DEVICES"
    display_name, device_noun = "MUSA", "Moore Threads GPU"
    install_hint = "install the torch_musa that matches this torch"
    check_hint = "check `mthreads-gmi` and the variable"

    def probe(self) -> tuple[bool, str]:
        # torch knows the "musa" device only once torch_musa is imported.
        try:
            importlib.import_module("torch_musa")
        except ImportError:
            return False, f"torch_musa is not installed; {self.install_hint}"
        return super().probe()

    def visible_devices(self, environ: Mapping[str, str]) -> list[int] | None:
        value = environ.get(self.visible_devices_env)
        return None if value is None else parse_musa_visible(self.visible_devices_env, value)


# Auto-detection tries it before the CPU; register_kind(MusaKind(), before="cuda") would
# try it earlier. Registering the same class again changes nothing.
devicekit.register_kind(MusaKind())

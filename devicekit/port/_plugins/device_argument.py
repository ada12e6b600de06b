"""Rule `device-argument`: a device passed to a call.

- `device=` of any call: `torch.zeros(3, device="cuda")` -> `device=devicekit.device()`,
  `device=local_rank` -> `device=devicekit.device(local_rank)` for torch's functions and
  tensor methods; elsewhere (a user's own function may expect the string) the string
  form, `device=devicekit.device_type()`.
- `torch.set_default_device("cuda")` -> `torch.set_default_device(devicekit.device())`.
"""

from typing import TYPE_CHECKING

import libcst as cst

from devicekit.port import names
from devicekit.port._plugins import call, keyword

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer

# `device=` on these methods takes a device.
_DEVICE_METHODS = {"to", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"}


@call(lambda port, qualified, method: bool(qualified & names.SET_DEFAULT_DEVICE))
def first_arg_device(
    port: "PortTransformer", original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """torch.set_default_device("cuda") -> torch.set_default_device(devicekit.device())."""
    if not updated.args or updated.args[0].keyword is not None:
        return None
    ported = port.port_arg(original, updated, updated.args[0], "device")
    return None if ported is None else port.changed(original, "device-argument", ported)


@keyword("device", "device-argument")
def device_keyword(
    port: "PortTransformer",
    original: cst.Call,
    updated: cst.Call,
    arg: cst.Arg,
    qualified: set[str],
    method: str | None,
) -> cst.Call | None:
    """device="cuda" -> device=devicekit.device() (torch) or devicekit.device_type()."""
    torch_call = any(q.startswith("torch.") for q in qualified) or method in _DEVICE_METHODS
    return port.port_arg(
        original, updated, arg, "device" if torch_call else "string", allow_int=torch_call
    )

"""Device and backend names written as strings stay strings, the device's own:

- rule `device-if-available`: `"cuda" if torch.cuda.is_available() else "cpu"` ->
  `devicekit.device_type()` (and `"nccl" if ... else "gloo"` -> `devicekit.backend()`);
- rule `device-string`: any other conditional (`"cuda" if use_cuda else "cpu"` ->
  `devicekit.device_type() if use_cuda else "cpu"`), and a string assigned, returned or
  given as a parameter's default: `device = "cuda:0"` -> `device =
  str(devicekit.device(0))`, `def run(device="cuda")` -> `def run(device=
  devicekit.device_type())`.
"""

import libcst as cst

from devicekit.port.nodes import is_devicekit_call, string_value
from devicekit.port.rule import Port

RULES = ("device-string", "device-if-available")


def leave_IfExp(port: Port, original: cst.IfExp, updated: cst.IfExp) -> cst.BaseExpression | None:
    """ "cuda" if torch.cuda.is_available() else "cpu" -> devicekit.device_type()."""
    body = port.value(original.body, updated.body, "string")
    orelse = port.value(original.orelse, updated.orelse, "string")
    if body is None and orelse is None:
        return None
    fallback = string_value(updated.orelse)
    accelerated = is_devicekit_call(updated.test, "is_available")
    if body is not None and orelse is None and accelerated and fallback in ("cpu", "gloo"):
        # "cuda" if torch.cuda.is_available() else "cpu": the device's own answer
        return port.changed(original, "device-if-available", body)
    return port.changed(
        original,
        "device-string",
        updated.with_changes(body=body or updated.body, orelse=orelse or updated.orelse),
    )


_Valued = cst.Assign | cst.AnnAssign | cst.Return


def leave_Assign(port: Port, original: _Valued, updated: _Valued) -> _Valued | None:
    """device = "cuda" -> device = devicekit.device_type() (also annotated, or returned)."""
    if original.value is None or updated.value is None:
        return None
    value = port.value(original.value, updated.value, "string")
    return (
        None
        if value is None
        else port.changed(original, "device-string", updated.with_changes(value=value))
    )


leave_AnnAssign = leave_Return = leave_Assign


def leave_Param(port: Port, original: cst.Param, updated: cst.Param) -> cst.Param | None:
    """def run(device="cuda") -> def run(device=devicekit.device_type())."""
    if original.default is None or updated.default is None:
        return None
    value = port.value(original.default, updated.default, "string")
    return (
        None
        if value is None
        else port.changed(original, "device-string", updated.with_changes(default=value))
    )

"""Pinned memory, which fails where no accelerator is present:

- rule `pin-memory`: `DataLoader(..., pin_memory=True)` ->
  `DataLoader(..., pin_memory=devicekit.pin_memory())`, and its `pin_memory_device="cuda"`
  (or "npu") -> `pin_memory_device=devicekit.device_type()`; the same in a dict of
  DataLoader arguments (`{"pin_memory": True, "pin_memory_device": "cuda"}`, passed on as
  `**kwargs`);
- rule `pin-memory-call`: `x.pin_memory()` -> `(x.pin_memory() if devicekit.pin_memory()
  else x)`; on anything but a name or an attribute it is reported for a manual change.
  Under `if device_type == "cuda":` (ported to `devicekit.is_accelerator(device_type)`)
  it is left as it is: an accelerator is there.
"""

from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m

from devicekit.port import names
from devicekit.port._plugins import call, keyword, leave
from devicekit.port.branches import guarded_by_accelerator
from devicekit.port.nodes import devicekit_call, is_devicekit_call, replace_arg_value

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer


@call(
    lambda port, qualified, method: (
        method == "pin_memory" and "devicekit.pin_memory" not in qualified
    )
)
def pin_memory_method(
    port: "PortTransformer", original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.BaseExpression | None:
    """x.pin_memory() -> (x.pin_memory() if devicekit.pin_memory() else x)."""
    if not isinstance(updated.func, cst.Attribute):
        return None  # `x.pin_memory` rewritten: no longer this method's call
    receiver = updated.func.value
    parent = port.parent(original)
    if (
        updated.args
        or m.matches(receiver, m.Name("devicekit"))
        or (isinstance(parent, cst.IfExp) and is_devicekit_call(parent.test, "pin_memory"))
    ):
        return None  # ported already
    if guarded_by_accelerator(port, original):
        return None  # `if device_type == "cuda": x.pin_memory()`: an accelerator is there
    if not isinstance(receiver, (cst.Name, cst.Attribute)):
        port.report(original, names.REASONS["pin-memory-call"])
        return updated
    return port.changed(
        original,
        "pin-memory-call",
        cst.IfExp(
            test=devicekit_call("pin_memory"),
            body=updated,
            orelse=receiver,
            lpar=[cst.LeftParen()],
            rpar=[cst.RightParen()],
        ),
    )


@keyword("pin_memory", "pin-memory")
def pin_memory_argument(
    port: "PortTransformer",
    original: cst.Call,
    updated: cst.Call,
    arg: cst.Arg,
    qualified: set[str],
    method: str | None,
) -> cst.Call | None:
    """pin_memory=True -> pin_memory=devicekit.pin_memory()."""
    if not m.matches(arg.value, m.Name("True")):
        return None
    return replace_arg_value(updated, arg, devicekit_call("pin_memory"))


@keyword("pin_memory_device", "pin-memory")
def pin_memory_device(
    port: "PortTransformer",
    original: cst.Call,
    updated: cst.Call,
    arg: cst.Arg,
    qualified: set[str],
    method: str | None,
) -> cst.Call | None:
    """pin_memory_device="npu" -> pin_memory_device=devicekit.device_type()."""
    return port.port_arg(original, updated, arg, "string")


@leave(cst.Dict)
def pin_memory_entries(
    port: "PortTransformer", original: cst.Dict, updated: cst.Dict
) -> cst.Dict | None:
    """{"pin_memory": True, "pin_memory_device": "cuda"} -> {"pin_memory":
    devicekit.pin_memory(), "pin_memory_device": devicekit.device_type()}: DataLoader's
    arguments kept in a dict."""
    elements = [
        _pin_memory_entry(port, old, new)
        for old, new in zip(original.elements, updated.elements, strict=True)
    ]
    if all(a is b for a, b in zip(elements, updated.elements, strict=True)):
        return None
    return port.changed(original, "pin-memory", updated.with_changes(elements=elements))


def _pin_memory_entry(
    port: "PortTransformer", original: cst.BaseDictElement, updated: cst.BaseDictElement
) -> cst.BaseDictElement:
    if not isinstance(original, cst.DictElement) or not isinstance(updated, cst.DictElement):
        return updated  # **more
    name = original.key.evaluated_value if isinstance(original.key, cst.SimpleString) else None
    value: cst.BaseExpression | None = None
    if name == "pin_memory" and m.matches(updated.value, m.Name("True")):
        value = devicekit_call("pin_memory")
    elif name == "pin_memory_device":
        value = port.value(original.value, updated.value, "string")
    return updated if value is None else updated.with_changes(value=value)

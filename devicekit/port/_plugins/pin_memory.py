"""Pinned memory, which fails where no accelerator is present:

- rule `pin-memory`: a dict of DataLoader arguments (`{"pin_memory": True,
  "pin_memory_device": "cuda"}`, passed on as `**kwargs`) -> `{"pin_memory":
  devicekit.pin_memory(), "pin_memory_device": devicekit.device_type()}`, as
  keyword_arguments ports them in a call (`DataLoader(..., pin_memory=True)`);
- rule `pin-memory-call`: `x.pin_memory()` -> `(x.pin_memory() if devicekit.pin_memory()
  else x)`; on anything but a name or an attribute it is reported for a manual change.
  Under `if device_type == "cuda":` (ported to `devicekit.is_accelerator(device_type)`)
  it is left as it is: an accelerator is there.
"""

import libcst as cst
import libcst.matchers as m

from devicekit.port import names
from devicekit.port.branches import guarded_by_accelerator
from devicekit.port.nodes import devicekit_call, is_devicekit_call
from devicekit.port.rule import Port

RULES = ("pin-memory-call", "pin-memory")


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    return method == "pin_memory" and "devicekit.pin_memory" not in qualified


def on_call(
    port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]
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


def leave_Dict(port: Port, original: cst.Dict, updated: cst.Dict) -> cst.Dict | None:
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
    port: Port, original: cst.BaseDictElement, updated: cst.BaseDictElement
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

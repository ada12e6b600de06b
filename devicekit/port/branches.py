"""What the test of a branch asks: "is there (or is this) an accelerator?" Shared by the
rules that port such tests and those that leave alone what runs only under them."""

from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m

from devicekit.port import names
from devicekit.port.nodes import ACCELERATOR_TYPES, string_value

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer


def is_accelerator_name(node: cst.CSTNode) -> bool:
    """Whether `node` is the string "cuda" or "npu"."""
    return string_value(node) in ACCELERATOR_TYPES


_ACCELERATOR_TYPE = m.Call(
    func=m.Attribute(value=m.Name("devicekit"), attr=m.Name("accelerator_type"))
)


def asks_for_accelerator(port: "PortTransformer", test: cst.BaseExpression) -> bool:
    """`"cuda" in device`, `device_type == "npu"`, `device.startswith("cuda")`,
    `torch.cuda.is_available()`, or their ported forms (`device_type ==
    devicekit.accelerator_type()`, `devicekit.is_accelerator(device)`, ...)."""
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        operator, left = test.comparisons[0].operator, test.left
        right = test.comparisons[0].comparator
        return (
            isinstance(operator, cst.Equal)
            and any(
                is_accelerator_name(side) or m.matches(side, _ACCELERATOR_TYPE)
                for side in (left, right)
            )
        ) or (isinstance(operator, cst.In) and is_accelerator_name(left))
    if isinstance(test, cst.Call):
        if (
            m.matches(test.func, m.Attribute(attr=m.Name("startswith")))
            and len(test.args) == 1
            and is_accelerator_name(test.args[0].value)
        ):
            return True
        return bool(
            port.qualified(test.func)
            & {"torch.cuda.is_available", "devicekit.is_available", "devicekit.is_accelerator"}
        )
    return False


def guarded_by_accelerator(port: "PortTransformer", node: cst.CSTNode) -> bool:
    """Whether `node` (of the original tree) runs only in the branch of an
    `if <accelerator test>:` (so an accelerator is there when it runs)."""
    child, parent = node, port.parent(node)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
        if (
            isinstance(parent, cst.If)
            and parent.body is child
            and asks_for_accelerator(port, parent.test)
        ):
            return True
        child, parent = parent, port.parent(parent)
    return False


def _guarded_body(port: "PortTransformer", node: cst.CSTNode) -> cst.CSTNode | None:
    """The code that runs when the test `node` is (or is part of) holds: the body of its
    `if`, `while` or conditional expression; None when `node` is no such test."""
    child, parent = node, port.parent(node)
    while isinstance(parent, (cst.BooleanOperation, cst.UnaryOperation)):
        child, parent = parent, port.parent(parent)
    if isinstance(parent, (cst.If, cst.IfExp, cst.While)) and parent.test is child:
        return parent.body
    return None


def guards_device_only_code(port: "PortTransformer", node: cst.CSTNode) -> bool:
    """Whether the test `node` guards code that runs on one device kind only
    (`if device.type == "cuda": start = torch.cuda.Event(...)`): widened to every
    accelerator, the guard would run that code on an NPU."""
    body = _guarded_body(port, node)
    if body is None:
        return False
    return any(
        names.is_device_only(name)
        for found in m.findall(body, m.Name() | m.Attribute())
        for name in port.written(found)
    )

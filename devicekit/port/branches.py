"""What the test of a branch asks: "is there (or is this) an accelerator?" Shared by the
rules that port such tests and those that leave alone what runs only under them."""

from typing import TypeGuard

import libcst as cst
import libcst.matchers as m

from devicekit.port import names
from devicekit.port.nodes import ACCELERATOR_TYPES, code, string_value
from devicekit.port.rule import Port


def _is_device_only(qualified: str) -> bool:
    """Whether `qualified` is a torch.cuda / torch.npu / torch_npu name that devicekit port
    leaves for a manual change (an event, a device property, an NPU operator): code that
    runs on that device only."""
    cuda = names.cuda_twin(qualified) or qualified
    if cuda.startswith("torch.cuda."):
        short = cuda[len("torch.cuda.") :]
        ported = (
            short in names.DEVICEKIT_FUNCTIONS
            or cuda in names.AUTOCAST | names.CUDA_GRAD_SCALER
            or cuda == names.OUT_OF_MEMORY
            or names.npu_setting(qualified) is not None
        )
        return not ported and names.manual_reason(qualified) is not None
    return qualified.split(".")[0] == names.TORCH_NPU and qualified.startswith(
        (f"{names.TORCH_NPU}.npu_", f"{names.TORCH_NPU}.optim", f"{names.TORCH_NPU}.profiler")
    )


def is_accelerator_name(node: cst.CSTNode) -> bool:
    """Whether `node` is the string "cuda" or "npu"."""
    return string_value(node) in ACCELERATOR_TYPES


def lists_an_accelerator(node: cst.CSTNode) -> TypeGuard[cst.Tuple | cst.List | cst.Set]:
    """Whether `node` is a tuple, list or set literal with "cuda" or "npu" among its
    elements (`("cuda",)`, `["cuda", "npu"]`)."""
    return isinstance(node, (cst.Tuple, cst.List, cst.Set)) and any(
        isinstance(element, cst.Element) and is_accelerator_name(element.value)
        for element in node.elements
    )


_ACCELERATOR_TYPE = m.Call(
    func=m.Attribute(value=m.Name("devicekit"), attr=m.Name("accelerator_type"))
)


_AVAILABLE = {
    "torch.cuda.is_available",
    "torch.distributed.is_nccl_available",
    "devicekit.is_available",
    "devicekit.is_accelerator",
}


def asks_for_accelerator(port: Port, test: cst.BaseExpression) -> bool:
    """`"cuda" in device`, `device_type == "npu"`, `device.type in ("cuda",)`,
    `device.startswith("cuda")`, `torch.cuda.is_available()`, `dist.is_nccl_available()`,
    `x.is_cuda`, or their ported forms (`device_type ==
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
        ) or (
            isinstance(operator, cst.In)
            and (is_accelerator_name(left) or lists_an_accelerator(right))
        )
    if isinstance(test, cst.Attribute) and test.attr.value in ("is_cuda", "is_npu"):
        return True
    if isinstance(test, cst.Call):
        if (
            m.matches(test.func, m.Attribute(attr=m.Name("startswith")))
            and len(test.args) == 1
            and is_accelerator_name(test.args[0].value)
        ):
            return True
        return bool(port.qualified(test.func) & _AVAILABLE)
    return False


_EXITS = {"exit", "quit", "sys.exit", "os._exit"}
_MESSAGES = {"print", "warnings.warn"}
_LOG_LEVELS = {"debug", "info", "warning", "warn", "error", "critical"}  # logging.x, log.x


def only_stops(block: cst.BaseSuite) -> bool:
    """Whether `block` stops the program: messages (print, logging, warnings), then a
    `raise` or an exit. (A `return` or a message alone is a branch, not a refusal.)"""
    lines = [block] if isinstance(block, cst.SimpleStatementSuite) else block.body
    smalls: list[cst.BaseSmallStatement] = []
    for line in lines:
        if not isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            return False
        smalls += line.body
    return bool(smalls) and _stops(smalls[-1]) and all(map(_reports, smalls[:-1]))


def _stops(small: cst.BaseSmallStatement) -> bool:
    return isinstance(small, cst.Raise) or (
        isinstance(small, cst.Expr)
        and isinstance(small.value, cst.Call)
        and code(small.value.func) in _EXITS
    )


def _reports(small: cst.BaseSmallStatement) -> bool:
    if not (isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)):
        return False
    func = small.value.func
    return code(func) in _MESSAGES or m.matches(
        func, m.Attribute(value=m.Name(), attr=m.OneOf(*map(m.Name, _LOG_LEVELS)))
    )


def skipped_elsewhere(port: Port, node: cst.CSTNode) -> bool:
    """Whether `node` (of the original tree) runs only behind the script's own test for
    one device kind, left as written (`if torch.cuda.is_available(): ...`, `x if
    device.type == "cuda" else y`), whose other way does not stop the program: on another
    device the script skips it, as its author meant."""
    child, parent = node, port.parent(node)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
        if isinstance(parent, (cst.If, cst.IfExp)) and parent.body is child:
            if not asks_for_accelerator(port, parent.test):
                return False
            orelse = parent.orelse
            return not (isinstance(orelse, cst.Else) and only_stops(orelse.body))
        child, parent = parent, port.parent(parent)
    return False


def guarded_by_accelerator(port: Port, node: cst.CSTNode) -> bool:
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


def _guarded_body(port: Port, node: cst.CSTNode) -> cst.CSTNode | None:
    """The code that runs when the test `node` is (or is part of) holds: the body of its
    `if`, `while` or conditional expression; None when `node` is no such test."""
    child, parent = node, port.parent(node)
    while isinstance(parent, (cst.BooleanOperation, cst.UnaryOperation)):
        child, parent = parent, port.parent(parent)
    if isinstance(parent, (cst.If, cst.IfExp, cst.While)) and parent.test is child:
        return parent.body
    return None


def guards_device_only_code(port: Port, node: cst.CSTNode) -> bool:
    """Whether the test `node` guards code that runs on one device kind only
    (`if device.type == "cuda": start = torch.cuda.Event(...)`): widened to every
    accelerator, the guard would run that code on an NPU."""
    body = _guarded_body(port, node)
    if body is None:
        return False
    return any(
        _is_device_only(name)
        for found in m.findall(body, m.Name() | m.Attribute())
        for name in port.written(found)
    )

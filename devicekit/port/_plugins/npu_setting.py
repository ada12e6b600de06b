"""Rule `npu-setting`: a process-wide Ascend setting written as a statement of its own
(`torch.npu.set_compile_mode(jit_compile=False)`, `torch.npu.set_option({...})`,
`torch.npu.config.allow_internal_format = False`, `torch.npu.matmul.allow_hf32 = True`,
or the same under torch_npu.npu) runs under `if devicekit.device_type() == "npu":`: on an
NPU as before (devicekit has imported torch_npu there), elsewhere not at all, where
torch.npu does not exist. Inside a larger expression it is reported for a manual change.
"""

import libcst as cst
import libcst.matchers as m

from devicekit.port import names
from devicekit.port.nodes import DEVICE_TYPE_GUARD, devicekit_call
from devicekit.port.rule import Port

RULES = ("npu-setting",)


def _target(small: cst.BaseSmallStatement) -> cst.BaseExpression | None:
    """What a one-statement setting names: the function called or the attribute set."""
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        return small.value.func
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        return small.targets[0].target
    return None


def _guarded_already(port: Port, line: cst.SimpleStatementLine) -> bool:
    block = port.parent(line)
    statement = port.parent(block) if block is not None else None
    return isinstance(statement, cst.If) and m.matches(statement.test, DEVICE_TYPE_GUARD)


def _setting(port: Port, line: cst.SimpleStatementLine) -> str | None:
    """ "set_compile_mode" & co. for a line that is one NPU setting, else None."""
    target = _target(line.body[0]) if len(line.body) == 1 else None
    if target is None:
        return None
    found = [names.npu_setting(n) for n in port.qualified(target)]
    return next((short for short in found if short), None)


def is_guarded(port: Port, node: cst.CSTNode) -> bool:
    """Whether `node` (a name or attribute) is the setting a line of its own makes, which
    this rule guards."""
    line = port.parent(port.statement_of(node))
    return (
        isinstance(line, cst.SimpleStatementLine)
        and _setting(port, line) is not None
        and _target(line.body[0]) is node
    )


def leave_SimpleStatementLine(
    port: Port, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
) -> cst.If | None:
    """torch.npu.set_compile_mode(jit_compile=False) -> the same, under
    `if devicekit.device_type() == "npu":`."""
    short = _setting(port, original)
    if short is None or _guarded_already(port, original):
        return None
    small = updated.body[0]
    target = cst.parse_expression(f"torch.npu.{short}")  # torch_npu.npu.X is torch.npu.X
    if isinstance(small, cst.Expr):
        small = small.with_changes(value=small.value.with_changes(func=target))
    elif isinstance(small, cst.Assign):
        small = small.with_changes(targets=[small.targets[0].with_changes(target=target)])
    test = cst.Comparison(
        left=devicekit_call("device_type"),
        comparisons=[
            cst.ComparisonTarget(operator=cst.Equal(), comparator=cst.SimpleString('"npu"'))
        ],
    )
    inner = updated.with_changes(
        body=[small.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)], leading_lines=()
    )
    return port.changed(
        original,
        "npu-setting",
        cst.If(
            test=test, body=cst.IndentedBlock(body=[inner]), leading_lines=updated.leading_lines
        ),
    )

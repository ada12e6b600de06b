"""Rule `accelerator-guard`: a guard that refuses to run without a GPU (or an NPU) goes,
because the ported script runs on a CPU too, DDP included (over gloo), and that is why it
was ported:

- `assert torch.cuda.is_available(), "we need CUDA for DDP"` (or
  `assert torch.cuda.device_count() > 0`) is removed, with the `if device_type == "cuda":`
  around it when it held nothing else;
- `if not torch.cuda.is_available(): sys.exit("no GPU")` (a body that stops the program:
  messages (print, logging, warnings) then `raise` or `sys.exit()`) is removed;
- `elif torch.cuda.is_available(): <setup> else: <report and exit>` keeps the setup as the
  `else:` branch, and `if torch.cuda.is_available(): <setup> else: <report and exit>` is
  the setup alone.
"""

import libcst as cst

from devicekit.port.branches import guards_device_only_code, only_stops
from devicekit.port.rule import Port

RULES = ("accelerator-guard",)
_RULE = RULES[0]
_AVAILABLE = "torch.cuda.is_available"  # torch.npu's is its twin
_COUNT = "torch.cuda.device_count"


def _is_call_of(port: Port, node: cst.CSTNode, name: str) -> bool:
    return isinstance(node, cst.Call) and name in port.qualified(node.func)


def _demands_accelerator(port: Port, test: cst.BaseExpression) -> bool:
    """`torch.cuda.is_available()`, `torch.cuda.device_count() > 0` (or `>= 1`)."""
    if _is_call_of(port, test, _AVAILABLE):
        return True
    if (
        isinstance(test, cst.Comparison)
        and len(test.comparisons) == 1
        and _is_call_of(port, test.left, _COUNT)
    ):
        target = test.comparisons[0]
        bound = {cst.GreaterThan: "0", cst.GreaterThanEqual: "1"}.get(type(target.operator))
        return isinstance(target.comparator, cst.Integer) and target.comparator.value == bound
    return False


def _statements(block: cst.BaseSuite) -> list[cst.SimpleStatementLine | cst.BaseCompoundStatement]:
    """The statements of `block`, each a line of its own (`if x: a; b` gives `a; b`)."""
    if isinstance(block, cst.SimpleStatementSuite):
        return [cst.SimpleStatementLine(body=block.body)]
    return [
        line
        for line in block.body
        if isinstance(line, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
    ]


def leave_Assert(
    port: Port, original: cst.Assert, updated: cst.Assert
) -> cst.RemovalSentinel | None:
    """assert torch.cuda.is_available(), "...": removed."""
    if not _demands_accelerator(port, original.test):
        return None
    return port.removed(original, _RULE)


def leave_If(
    port: Port, original: cst.If, updated: cst.If
) -> cst.RemovalSentinel | cst.Else | cst.FlattenSentinel[cst.BaseStatement] | None:
    """if not torch.cuda.is_available(): exit: removed; an available-or-exit branch: its
    setup, unconditional."""
    test = original.test
    if original.orelse is None and all(
        isinstance(line, cst.SimpleStatementLine)
        and all(
            isinstance(small, cst.Assert) and _demands_accelerator(port, small.test)
            for small in line.body
        )
        for line in _statements(original.body)
    ):  # `if device_type == "cuda": assert torch.cuda.is_available()`: nothing left to run
        return port.removed(original, _RULE)
    if (
        isinstance(test, cst.UnaryOperation)
        and isinstance(test.operator, cst.Not)
        and _demands_accelerator(port, test.expression)
        and original.orelse is None
        and only_stops(original.body)
    ):
        return port.removed(original, _RULE)
    orelse = original.orelse
    if not (
        _demands_accelerator(port, test)
        and isinstance(orelse, cst.Else)
        and only_stops(orelse.body)
    ) or guards_device_only_code(port, test):
        return None
    parent = port.parent(original)
    if isinstance(parent, cst.If) and parent.orelse is original:  # elif ...: / else: exit
        return port.changed(
            original, _RULE, cst.Else(body=updated.body, leading_lines=updated.leading_lines)
        )
    body = _statements(updated.body)
    body[0] = body[0].with_changes(  # the comments above the `if` stay above its setup
        leading_lines=[*updated.leading_lines, *body[0].leading_lines]
    )
    port.changed(original, _RULE, cst.Module(body=body))
    return cst.FlattenSentinel(body)

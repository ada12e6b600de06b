"""Rule `accelerator-guard`: a guard that refuses to run without a GPU (or an NPU) goes,
because the ported script runs on a CPU too, DDP included (over gloo), and that is why it
was ported:

- `assert torch.cuda.is_available(), "we need CUDA for DDP"` (or
  `assert torch.cuda.device_count() > 0`) is removed;
- `if not torch.cuda.is_available(): sys.exit("no GPU")` (a body that only reports and
  stops: print, logging, warnings, raise, exit, return) is removed;
- `elif torch.cuda.is_available(): <setup> else: <report and exit>` keeps the setup as the
  `else:` branch, and `if torch.cuda.is_available(): <setup> else: <report and exit>` is
  the setup alone.
"""

from typing import TYPE_CHECKING, Optional, Sequence, Union

import libcst as cst
import libcst.matchers as m

from devicekit.port._plugins import leave
from devicekit.port.nodes import code

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer

_RULE = "accelerator-guard"
_AVAILABLE = "torch.cuda.is_available"  # torch.npu's is its twin
_COUNT = "torch.cuda.device_count"
_STOPPERS = {"print", "exit", "quit", "sys.exit", "os._exit", "warnings.warn"}
_LOG_LEVELS = {"debug", "info", "warning", "warn", "error", "critical"}  # logging.x, log.x


def _is_call_of(port: "PortTransformer", node: cst.CSTNode, name: str) -> bool:
    return isinstance(node, cst.Call) and name in port.qualified(node.func)


def _demands_accelerator(port: "PortTransformer", test: cst.BaseExpression) -> bool:
    """`torch.cuda.is_available()`, `torch.cuda.device_count() > 0` (or `>= 1`)."""
    if _is_call_of(port, test, _AVAILABLE):
        return True
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and \
            _is_call_of(port, test.left, _COUNT):
        target = test.comparisons[0]
        bound = {cst.GreaterThan: "0", cst.GreaterThanEqual: "1"}.get(type(target.operator))
        return isinstance(target.comparator, cst.Integer) and target.comparator.value == bound
    return False


def _only_stops(port: "PortTransformer", block: cst.BaseSuite) -> bool:
    """Whether `block` only reports and stops (print/log/warn, then raise/exit/return)."""
    lines = [block] if isinstance(block, cst.SimpleStatementSuite) else block.body
    smalls = []
    for line in lines:
        if not isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            return False
        smalls += line.body
    return bool(smalls) and all(
        isinstance(small, (cst.Raise, cst.Return)) or (
            isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)
            and _reports_or_stops(small.value.func))
        for small in smalls)


def _reports_or_stops(func: cst.BaseExpression) -> bool:
    return code(func) in _STOPPERS or m.matches(func, m.Attribute(
        value=m.Name(), attr=m.OneOf(*map(m.Name, _LOG_LEVELS))))


@leave(cst.Assert)
def assertion(port: "PortTransformer", original: cst.Assert, updated: cst.Assert
              ) -> Optional[cst.RemovalSentinel]:
    """assert torch.cuda.is_available(), "...": removed."""
    if not _demands_accelerator(port, original.test):
        return None
    return port.removed(original, _RULE)


@leave(cst.If)
def if_statement(port: "PortTransformer", original: cst.If, updated: cst.If
                 ) -> Union[None, cst.RemovalSentinel, cst.Else,
                            cst.FlattenSentinel[cst.BaseStatement]]:
    """if not torch.cuda.is_available(): exit: removed; an available-or-exit branch: its
    setup, unconditional."""
    test = original.test
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) and \
            _demands_accelerator(port, test.expression) and original.orelse is None and \
            _only_stops(port, original.body):
        return port.removed(original, _RULE)
    orelse = original.orelse
    if not (_demands_accelerator(port, test) and isinstance(orelse, cst.Else)
            and _only_stops(port, orelse.body)):
        return None
    parent = port.parent(original)
    if isinstance(parent, cst.If) and parent.orelse is original:  # elif ...: / else: exit
        return port.changed(original, _RULE, cst.Else(body=updated.body))
    body: Sequence[cst.BaseStatement] = updated.body.body \
        if isinstance(updated.body, cst.IndentedBlock) else [cst.SimpleStatementLine(
            body=updated.body.body)]
    port.changed(original, _RULE, cst.Module(body=list(body)))
    return cst.FlattenSentinel(body)

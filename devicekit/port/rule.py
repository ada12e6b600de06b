"""What a port rule is (the `Rule` Protocol, its hooks) and what it may ask of the pass
that runs it (the `Port` Protocol); the bottom of devicekit port's rules.

A rule is a module in port/_plugins/, named for the idiom it ports (`cuda_method.py`:
`x.cuda()`, rule `cuda-method`), listed once in registry.PLUGINS. It has RULES, the ids
of the rules it reports (its docstring names each one), and any of these hooks, read with
getattr; each receives `port` (a Port) first:

- `leave_<NodeType>(port, original, updated)` (leave_Assign, leave_Dict, ...: the node
  types in LEAVE_TYPES): the replacement of such a node, or None to leave it to the next
  rule.
- `matches_call(port, qualified, method) -> bool` with `on_call(port, original, updated,
  qualified)`: a call whose qualified names or method (the name after its last dot, or
  None) match; the replacement, or None. Only the first rule that matches a call is
  tried; when it returns None, the call is handled as one no rule rewrote.
- `on_unported_call(port, original, qualified)`: each call no call rule rewrote.
- KEYWORDS (keyword -> rule id) with `on_keyword(port, original, updated, arg, qualified,
  method)`: an argument `keyword=...` of a call no call rule rewrote (or of one a call rule
  hands to `port.keywords`); the call with it ported, or None. Reported as its rule id.
- `on_reference(port, original, updated, name)`: a Name or Attribute at the end of its
  attribute chain, once per qualified name it may refer to; the replacement, or None.

Rules are tried in the order of registry.PLUGINS, hook by hook.
"""

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import libcst as cst

from devicekit.port.facts import Facts

_Node = TypeVar("_Node", bound=cst.CSTNode)

# The node types a rule may have a leave_<NodeType> hook for (the transformer's _leave).
LEAVE_TYPES = (
    "Assert",
    "AnnAssign",
    "Assign",
    "Attribute",
    "BooleanOperation",
    "Comparison",
    "Decorator",
    "Dict",
    "If",
    "IfExp",
    "Import",
    "ImportFrom",
    "Param",
    "Return",
    "SimpleStatementLine",
)


class Port(Protocol):
    """What a rule may ask of the pass running it (see transformer.PortTransformer)."""

    module: cst.Module  # the module being ported, as parsed
    facts: Facts  # what the first pass found out about it

    def qualified(self, node: cst.CSTNode) -> set[str]:
        """The qualified names `node` may refer to, with the CUDA twins of Ascend names."""
        ...

    def written(self, node: cst.CSTNode) -> set[str]:
        """The qualified names `node` may refer to, as written (no twins)."""
        ...

    def is_twin(self, node: cst.CSTNode, name: str) -> bool:
        """Whether `name` is only the CUDA twin of an Ascend name `node` refers to."""
        ...

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The node of the original tree that holds `node` (None for the module)."""
        ...

    def call_of(self, node: cst.CSTNode) -> cst.Call | None:
        """The call whose function `node` is, else None."""
        ...

    def statement_of(self, node: cst.CSTNode) -> cst.CSTNode:
        """The outermost expression or small statement `node` is part of."""
        ...

    def changed(self, original: cst.CSTNode, rule: str, updated: _Node) -> _Node:
        """Record that rule `rule` rewrote `original` as `updated`; `updated`."""
        ...

    def removed(self, original: cst.CSTNode, rule: str) -> cst.RemovalSentinel:
        """Record that rule `rule` removed `original`; the sentinel that removes it."""
        ...

    def reverted(self, original: _Node) -> _Node:
        """Forget the rewrites inside `original`; `original`, to stand as it was."""
        ...

    def report(self, original: cst.CSTNode, why_fix: tuple[str, str]) -> None:
        """Record `original`, left alone, as needing a change by hand (why, fix)."""
        ...

    def keep(self, original: cst.CSTNode, note: str) -> None:
        """Record `original` as kept on purpose, with a note for the reader."""
        ...

    def value(
        self,
        original: cst.BaseExpression,
        updated: cst.BaseExpression,
        want: str,
        allow_int: bool = False,
    ) -> cst.BaseExpression | None:
        """The ported form of a value that wants a "device", a "string" or a "backend"."""
        ...

    def port_arg(
        self,
        original: cst.Call,
        updated: cst.Call,
        arg: cst.Arg,
        want: str,
        allow_int: bool = False,
    ) -> cst.Call | None:
        """`updated` with argument `arg`'s value ported (see `value`); None if unchanged."""
        ...

    def keywords(
        self, original: cst.Call, updated: cst.Call, qualified: set[str], method: str | None
    ) -> tuple[cst.Call, str | None]:
        """`updated` with the keyword arguments the keyword rules port, and the rule id of
        the first one ported (None: nothing was)."""
        ...

    def accelerator_only(self, call: cst.Call, args: dict[str, cst.Arg | None]) -> cst.Call:
        """`call` with each of `args` passed as `value if devicekit.is_available() else
        None`."""
        ...

    def accelerator_flag(self, call: cst.Call, arg: cst.Arg | None) -> cst.Call:
        """`call` with flag `arg` true only where there is an accelerator."""
        ...


class Rule(Protocol):
    """A rule module: RULES, and the optional hooks of this module's docstring."""

    @property
    def RULES(self) -> tuple[str, ...]:  # read-only: each module has its own tuple
        """The ids of the rules the module reports (`("cuda-method",)`)."""
        ...


# What a leave hook may return (besides None): libcst takes each node type's own.
LeaveResult = (
    cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNode] | cst.MaybeSentinel
)
# The hooks' types; the nodes a leave hook receives are of its node type.
LeaveHook = Callable[[Port, Any, Any], LeaveResult | None]
CallMatcher = Callable[[Port, set[str], str | None], bool]
CallHook = Callable[[Port, cst.Call, cst.Call, set[str]], cst.BaseExpression | None]
UnportedCallHook = Callable[[Port, cst.Call, set[str]], None]
KeywordHook = Callable[[Port, cst.Call, cst.Call, cst.Arg, set[str], str | None], cst.Call | None]
ReferenceHook = Callable[
    [Port, cst.Name | cst.Attribute, cst.BaseExpression, str], cst.BaseExpression | None
]

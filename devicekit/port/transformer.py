"""The transformer: one libcst pass that offers each node to the hooks of the rule modules
(registry.PLUGINS, in order; rule.py says what they hold) and records what they changed,
left and kept.

Every rewrite keeps what the script computes on a GPU: `x.cuda(i)` becomes
`x.to(devicekit.device(i))` (cuda:i there), `backend="nccl"` becomes
`devicekit.backend()` ("nccl" there), `torch.cuda.amp.autocast()` becomes
`devicekit.autocast(enabled=devicekit.is_available())` (float16 autocast there). Strings
stay strings (`device = "cuda"` becomes `devicekit.device_type()`, "cuda" on a GPU) and
devices stay devices. What has no portable equivalent is left alone and reported (see names.MANUAL).

Rules match on the original tree (qualified names come from its metadata) and build from
the updated one, so nested rewrites compose: `torch.device("cuda" if
torch.cuda.is_available() else "cpu")` ends as `devicekit.device()`.
"""

from typing import TypeVar, overload

import libcst as cst
import libcst.matchers as m
from libcst.metadata import ParentNodeProvider, PositionProvider, QualifiedNameProvider

from devicekit.port import names, registry
from devicekit.port.facts import Facts
from devicekit.port.nodes import (
    NOT_DEVICE,
    code,
    device_call,
    device_str,
    devicekit_call,
    is_backend_name,
    is_devicekit_call,
    parse_device_string,
    replace_arg_value,
)
from devicekit.port.report import Change, Info, Manual
from devicekit.port.rule import LeaveResult

_Node = TypeVar("_Node", bound=cst.CSTNode)


def _short(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class PortTransformer(cst.CSTTransformer):
    """Ports one module with the rules of registry.PLUGINS; `changes`, `manual` and `info`
    say what it did and left. It is the `Port` (rule.py) its rules receive."""

    METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider, ParentNodeProvider)

    def __init__(self, module: cst.Module, facts: Facts) -> None:
        super().__init__()
        self.module, self.facts = module, facts
        self._hooks = registry.hooks(registry.PLUGINS)
        # id(original node) -> (line, rule, before, after, id()s of its ancestors)
        self._rewrites: dict[int, tuple[int, str, str, str, list[int]]] = {}
        self._manual: dict[tuple[int, str], Manual] = {}
        self._info: dict[tuple[int, str], Info] = {}

    # -- bookkeeping -----------------------------------------------------------------

    def qualified(self, node: cst.CSTNode) -> set[str]:
        """The qualified names `node` may refer to, with the CUDA twins of its Ascend names
        (`torch.npu.synchronize` also reads `torch.cuda.synchronize`: see names.py)."""
        return names.with_twins(self.written(node))

    def written(self, node: cst.CSTNode) -> set[str]:
        """The qualified names `node` may refer to, as written (no twins)."""
        return {q.name for q in self.get_metadata(QualifiedNameProvider, node, set())}

    def is_twin(self, node: cst.CSTNode, name: str) -> bool:
        """Whether `name` is only the CUDA twin of an Ascend name `node` refers to."""
        return name not in self.written(node)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The node of the original tree that holds `node` (None for the module)."""
        return self.get_metadata(ParentNodeProvider, node, None)

    def call_of(self, node: cst.CSTNode) -> cst.Call | None:
        """The call whose function `node` is, else None."""
        parent = self.parent(node)
        return parent if isinstance(parent, cst.Call) and parent.func is node else None

    def statement_of(self, node: cst.CSTNode) -> cst.CSTNode:
        """The outermost expression or small statement `node` is part of."""
        while True:
            parent = self.parent(node)
            if parent is None or isinstance(
                parent, (cst.SimpleStatementLine, cst.BaseCompoundStatement)
            ):
                return node
            node = parent

    def _line(self, node: cst.CSTNode) -> int:
        return self.get_metadata(PositionProvider, node).start.line

    def changed(self, original: cst.CSTNode, rule: str, updated: _Node) -> _Node:
        """Record that rule `rule` rewrote `original` as `updated`; `updated`."""
        self._record(original, rule, code(updated))
        return updated

    def removed(self, original: cst.CSTNode, rule: str) -> cst.RemovalSentinel:
        """Record that rule `rule` removed `original`; the sentinel that removes it."""
        self._record(original, rule, "")
        return cst.RemoveFromParent()

    def reverted(self, original: _Node) -> _Node:
        """Forget the rewrites inside `original`; `original`, to stand as it was."""
        self._rewrites = {
            key: entry for key, entry in self._rewrites.items() if id(original) not in entry[4]
        }
        return original

    def _record(self, original: cst.CSTNode, rule: str, after: str) -> None:
        ancestors = []
        parent = self.parent(original)
        while parent is not None:
            ancestors.append(id(parent))
            parent = self.parent(parent)
        self._rewrites[id(original)] = (
            self._line(original),
            rule,
            self.module.code_for_node(original),
            after,
            ancestors,
        )

    def report(self, original: cst.CSTNode, why_fix: tuple[str, str]) -> None:
        """Record `original`, left alone, as needing a change by hand (why, fix)."""
        construct = _short(self.module.code_for_node(original))
        line = self._line(original)
        self._manual.setdefault((line, construct), Manual(line, construct, *why_fix))

    def keep(self, original: cst.CSTNode, note: str) -> None:
        """Record `original` as kept on purpose, with a note for the reader."""
        construct = _short(self.module.code_for_node(original))
        line = self._line(original)
        self._info.setdefault((line, construct), Info(line, construct, note))

    def changes(self) -> list[Change]:
        """One Change per outermost rewritten node; nested rewrites add their rule ids."""
        outer: dict[int, Change] = {}
        nested: list[tuple[int, str]] = []
        for key, (line, rule, before, after, ancestors) in self._rewrites.items():
            rewritten = [a for a in ancestors if a in self._rewrites]
            if rewritten:
                nested.append((rewritten[-1], rule))  # the outermost one
            else:
                outer[key] = Change(line, rule, before, after, [rule])
        for ancestor, rule in nested:
            outer[ancestor].rules.append(rule)
        return sorted(outer.values(), key=lambda c: c.line)

    def manual(self) -> list[Manual]:
        """Constructs left alone that need a change by hand, by line."""
        return sorted(self._manual.values(), key=lambda item: item.line)

    def info(self) -> list[Info]:
        """Constructs kept on purpose, by line."""
        return sorted(self._info.values(), key=lambda i: i.line)

    # -- values: device strings, backends, ranks ------------------------------------

    def value(
        self,
        original: cst.BaseExpression,
        updated: cst.BaseExpression,
        want: str,
        allow_int: bool = False,
    ) -> cst.BaseExpression | None:
        """The ported form of a value in a position that wants a "device" (torch.device),
        a "string" (a device or backend name) or a "backend"; None when nothing to port."""
        index = parse_device_string(updated)
        if index is not NOT_DEVICE and want != "backend":
            return device_call(index) if want == "device" else device_str(index)
        if is_backend_name(updated) and want != "device":
            return devicekit_call("backend")
        if want == "device" and updated is not original:
            # a string form made inside this value (the IfExp idiom) in a device position
            if is_devicekit_call(updated, "device_type") and not updated.args:
                return device_call(None)
            if (
                isinstance(updated, cst.Call)
                and m.matches(updated.func, m.Name("str"))
                and len(updated.args) == 1
                and is_devicekit_call(updated.args[0].value, "device")
            ):
                return updated.args[0].value
        if want == "device" and allow_int and self.facts.holds_rank(original):
            return device_call(updated)
        return None

    def port_arg(
        self,
        original: cst.Call,
        updated: cst.Call,
        arg: cst.Arg,
        want: str,
        allow_int: bool = False,
    ) -> cst.Call | None:
        """`updated` with argument `arg`'s value ported (see `value`); None when nothing
        to port."""
        position = next(i for i, a in enumerate(updated.args) if a is arg)
        value = self.value(original.args[position].value, arg.value, want, allow_int)
        return None if value is None else replace_arg_value(updated, arg, value)

    def keywords(
        self, original: cst.Call, updated: cst.Call, qualified: set[str], method: str | None
    ) -> tuple[cst.Call, str | None]:
        """`updated` with the keyword arguments the keyword rules port (any call:
        DataLoader(pin_memory=True), torch.load(map_location=...), torch.zeros(...,
        device="cuda"), add_argument(default="nccl"), ...), and the rule of the first one
        ported (None: nothing was)."""
        result, rule = updated, None
        for arg in updated.args:
            if arg.keyword is None or arg.keyword.value not in self._hooks.keyword:
                continue
            rule_id, port_keyword = self._hooks.keyword[arg.keyword.value]
            ported = port_keyword(self, original, result, arg, qualified, method)
            if ported is not None:
                result, rule = ported, rule or rule_id
        return result, rule

    @staticmethod
    def accelerator_only(call: cst.Call, args: dict[str, cst.Arg | None]) -> cst.Call:
        """`call` with each of `args` (if given and not None already) passed as
        `value if devicekit.is_available() else None`."""
        for arg in args.values():
            if not arg or m.matches(arg.value, m.Name("None")) or isinstance(arg.value, cst.IfExp):
                continue
            guarded = cst.IfExp(
                test=devicekit_call("is_available"), body=arg.value, orelse=cst.Name("None")
            )
            call = replace_arg_value(call, arg, guarded)
        return call

    @staticmethod
    def accelerator_flag(call: cst.Call, arg: cst.Arg | None) -> cst.Call:
        """`call` with flag `arg` (if given and not False) true only where there is an
        accelerator: `True` -> `devicekit.is_available()`, `x` -> `x and
        devicekit.is_available()`."""
        if arg is None or m.matches(arg.value, m.Name("False")):
            return call
        last = arg.value.right if isinstance(arg.value, cst.BooleanOperation) else arg.value
        if is_devicekit_call(last, "is_available"):  # ported already
            return call
        available = devicekit_call("is_available")
        value: cst.BaseExpression = (
            available
            if m.matches(arg.value, m.Name("True"))
            else cst.BooleanOperation(left=arg.value, operator=cst.And(), right=available)
        )
        return replace_arg_value(call, arg, value)

    # -- dispatch to the rules ----------------------------------------------------------

    # Each node type's rules return what libcst takes in its place, as the leave_* types of
    # libcst.CSTTransformer declare it, one overload per kind of node. (libcst also takes
    # the `else:` an `elif` becomes, which its leave_If type leaves out: accelerator_guard.)
    @overload
    def _leave(
        self, original_node: cst.BaseExpression, updated_node: cst.BaseExpression
    ) -> cst.BaseExpression: ...

    @overload
    def _leave(
        self, original_node: cst.BaseSmallStatement, updated_node: cst.BaseSmallStatement
    ) -> (
        cst.BaseSmallStatement | cst.FlattenSentinel[cst.BaseSmallStatement] | cst.RemovalSentinel
    ): ...

    @overload
    def _leave(
        self, original_node: cst.BaseStatement, updated_node: cst.BaseStatement
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel: ...

    @overload
    def _leave(
        self, original_node: cst.Param, updated_node: cst.Param
    ) -> cst.Param | cst.MaybeSentinel | cst.FlattenSentinel[cst.Param] | cst.RemovalSentinel: ...

    @overload
    def _leave(
        self, original_node: cst.Decorator, updated_node: cst.Decorator
    ) -> cst.Decorator | cst.FlattenSentinel[cst.Decorator] | cst.RemovalSentinel: ...

    def _leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> LeaveResult:
        """The first rewrite a leave rule for this node type returns, else `updated_node`."""
        for rule in self._hooks.leave.get(type(original_node).__name__, ()):
            result = rule(self, original_node, updated_node)
            if result is not None:
                return result
        return updated_node

    # the node types rules have leave hooks for (rule.LEAVE_TYPES)
    leave_IfExp = leave_Assign = leave_AnnAssign = leave_Return = leave_Param = _leave
    leave_Comparison = leave_Import = leave_ImportFrom = leave_Decorator = leave_Dict = _leave
    leave_Assert = leave_If = leave_SimpleStatementLine = leave_BooleanOperation = _leave

    # Import statements name modules, not references: only their leave rules see them.
    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        left = self._leave(original_node, updated_node)
        return self._reference(original_node, updated_node) if left is updated_node else left

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        parent = self.parent(original_node)
        if isinstance(parent, cst.Attribute) and parent.attr is original_node:
            return updated_node
        return self._reference(original_node, updated_node)

    def _reference(
        self, original: cst.Name | cst.Attribute, updated: cst.BaseExpression
    ) -> cst.BaseExpression:
        """A name at the end of its attribute chain (`torch.cuda.synchronize`), offered to
        the reference rules once per qualified name."""
        parent = self.parent(original)
        if isinstance(parent, cst.Attribute) and parent.value is original:
            return updated  # not the end of the chain: `torch.cuda` in `torch.cuda.amp`
        for name in self.qualified(original):
            for rule in self._hooks.reference:
                result = rule(self, original, updated, name)
                if result is not None:
                    return result
        return updated

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = original_node.func
        qualified = self.qualified(func)
        method = func.attr.value if isinstance(func, cst.Attribute) else None
        for matches, rule in self._hooks.call:
            if matches(self, qualified, method):
                result = rule(self, original_node, updated_node, qualified)
                if result is not None:
                    return result
                break
        for check in self._hooks.unported_call:
            check(self, original_node, qualified)
        ported, rule_id = self.keywords(original_node, updated_node, qualified, method)
        return updated_node if rule_id is None else self.changed(original_node, rule_id, ported)

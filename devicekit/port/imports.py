"""Imports after porting: `import devicekit` added once, where a reader expects it, and
torch (and torch_npu) submodule imports the rewrites left unused (`from torch.cuda.amp
import autocast`) removed. `import torch` itself is never removed; torch_npu's side-effect
imports are npu_imports.py's."""

from typing import TypeVar

import libcst as cst
from libcst.metadata import GlobalScope, MetadataWrapper, ScopeProvider

from devicekit.port.names import TORCH_NPU

_Import = cst.Import | cst.ImportFrom
_ImportT = TypeVar("_ImportT", cst.Import, cst.ImportFrom)


def _bound_name(alias: cst.ImportAlias) -> str:
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    return cst.Module(body=[]).code_for_node(alias.name).split(".")[0]


def _module_of(statement: cst.BaseSmallStatement) -> str:
    if isinstance(statement, cst.ImportFrom):
        return (
            ""
            if statement.module is None or statement.relative
            else cst.Module(body=[]).code_for_node(statement.module)
        )
    return ""


def import_uses(wrapper: MetadataWrapper) -> dict[str, int]:
    """{name bound by a top-level `from torch.X import ...`, `import torch.X as Y` or
    torch_npu import: how many times the wrapped module reads it}. The wrapper's scopes
    are computed once: the port's own wrapper has them already."""
    scopes = wrapper.resolve(ScopeProvider)
    global_scope = next(s for s in scopes.values() if isinstance(s, GlobalScope))
    uses: dict[str, int] = {}
    for statement in _import_statements(wrapper.module):
        for alias in statement.names if not isinstance(statement.names, cst.ImportStar) else []:
            name = _bound_name(alias)
            if name != "torch" and _is_torch_submodule(statement, alias):
                uses[name] = sum(len(a.references) for a in global_scope[name])
    return uses


def _imported(statement: _Import, alias: cst.ImportAlias) -> str:
    """The module or name an import alias brings in, in full (`torch_npu.contrib.
    transfer_to_npu` for `from torch_npu.contrib import transfer_to_npu`)."""
    name = cst.Module(body=[]).code_for_node(alias.name)
    return f"{_module_of(statement)}.{name}" if isinstance(statement, cst.ImportFrom) else name


def _is_torch_submodule(statement: _Import, alias: cst.ImportAlias) -> bool:
    if _imported(statement, alias).split(".")[0] == TORCH_NPU:
        return True
    if isinstance(statement, cst.ImportFrom):
        return _module_of(statement).startswith("torch.") or _module_of(statement) == "torch"
    return alias.asname is not None and cst.Module(body=[]).code_for_node(alias.name).startswith(
        "torch."
    )


def _import_statements(module: cst.Module) -> list[_Import]:
    return [
        small
        for line in module.body
        if isinstance(line, cst.SimpleStatementLine)
        for small in line.body
        if isinstance(small, (cst.Import, cst.ImportFrom))
    ]


class _DropAliases(cst.CSTTransformer):
    def __init__(self, unused: set[str]) -> None:
        super().__init__()
        self.unused = unused

    def _keep(self, updated: _ImportT) -> _ImportT | cst.RemovalSentinel:
        if isinstance(updated.names, cst.ImportStar):
            return updated
        kept = [a for a in updated.names if _bound_name(a) not in self.unused]
        if len(kept) == len(updated.names):
            return updated
        if not kept:
            return cst.RemoveFromParent()
        kept[-1] = kept[-1].with_changes(comma=updated.names[-1].comma)
        return updated.with_changes(names=kept)

    def leave_Import(
        self, original_node: cst.Import, updated_node: cst.Import
    ) -> cst.Import | cst.RemovalSentinel:
        return self._keep(updated_node)

    def leave_ImportFrom(
        self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom
    ) -> cst.ImportFrom | cst.RemovalSentinel:
        return self._keep(updated_node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # top-level imports only

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False


def drop_unused(module: cst.Module, before: dict[str, int]) -> cst.Module:
    """`module` without the torch submodule imports that were read before porting
    (`before`, from import_uses) and are read no more."""
    after = import_uses(MetadataWrapper(module, unsafe_skip_copy=True))
    unused = {name for name, count in after.items() if count == 0 and before.get(name, 0) > 0}
    return module.visit(_DropAliases(unused)) if unused else module


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _only_imports(statement: cst.CSTNode) -> bool:
    if isinstance(statement, cst.SimpleStatementLine):
        return all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body)
    if isinstance(statement, (cst.Try, cst.If)):  # try: import x / except ImportError: ...
        blocks = [statement.body] + [h.body for h in getattr(statement, "handlers", ())]
        return all(
            isinstance(line, cst.SimpleStatementLine)
            and all(
                isinstance(s, (cst.Import, cst.ImportFrom, cst.Pass, cst.Assign)) for s in line.body
            )
            for block in blocks
            for line in block.body
        )
    return False


def _binds_devicekit(module: cst.Module) -> bool:
    for statement in _import_statements(module):
        if isinstance(statement, cst.Import) and any(
            _bound_name(a) == "devicekit" for a in statement.names
        ):
            return True
    return False


class _FindDevicekit(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found = False

    def visit_Name(self, node: cst.Name) -> None:
        self.found = self.found or node.value == "devicekit"


def _mentions_devicekit(statement: cst.CSTNode) -> bool:
    finder = _FindDevicekit()
    statement.visit(finder)
    return finder.found


def add_devicekit(module: cst.Module) -> cst.Module:
    """`module` with `import devicekit` after the last import at the top of the file
    (after the docstring and any `from __future__` import when there is none), when it
    uses devicekit and does not import it yet."""
    if _binds_devicekit(module) or not _mentions_devicekit(module):
        return module
    body = list(module.body)
    position = 1 if body and _is_docstring(body[0]) else 0
    for index in range(position, len(body)):
        if _mentions_devicekit(body[index]):
            break  # before its first use, whatever follows
        if _only_imports(body[index]):
            position = index + 1
        elif not isinstance(body[index], cst.SimpleStatementLine):
            break  # the first def, class or block ends the top of the file
    line = cst.SimpleStatementLine(
        body=[cst.Import(names=[cst.ImportAlias(name=cst.Name("devicekit"))])]
    )
    body.insert(position, line)
    return module.with_changes(body=body)

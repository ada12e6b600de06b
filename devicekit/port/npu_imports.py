"""torch_npu's side-effect imports after porting: `import torch_npu` (it registers
torch.npu) and `from torch_npu.contrib import transfer_to_npu` (it maps torch.cuda onto
the NPU), wherever they are: at the top, under `if torch.__version__ >= "1.8":`, in a
`try:` or a function. A ported script needs neither once it reads nothing they give:
devicekit imports torch_npu itself where there is an NPU. One still needed stays, and is
reported with what still needs it."""

from typing import NamedTuple, TypeVar

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider

from devicekit.port.nodes import DEVICE_TYPE_GUARD, code
from devicekit.port.report import Change, Manual

_TORCH_NPU, _TRANSFER = "torch_npu", "torch_npu.contrib.transfer_to_npu"
# What may do something when an `if` test is evaluated.
_ACTS = m.Call() | m.NamedExpr() | m.Await() | m.Yield()
_STILL_NEEDED = {
    _TORCH_NPU: (
        "the ported script still reads torch_npu or torch.npu names (reported "
        "above) that only this import provides",
        'port them, or move them under `if devicekit.device_type() == "npu":`; '
        "then remove the import, which fails where torch_npu is not installed",
    ),
    _TRANSFER: (
        "the ported script still calls torch.cuda names (reported above) that "
        "transfer_to_npu maps onto the NPU",
        "port them by hand; then remove the import, which fails without torch_npu",
    ),
}


_ImportT = TypeVar("_ImportT", cst.Import, cst.ImportFrom)


class SideEffectImport(NamedTuple):
    imported: str  # "torch_npu" or "torch_npu.contrib.transfer_to_npu"
    line: int
    statement: str


def _imported(statement: cst.CSTNode, alias: cst.ImportAlias) -> str:
    name = code(alias.name)
    if isinstance(statement, cst.ImportFrom) and statement.module is not None:
        return f"{code(statement.module)}.{name}"
    return name


def _aliases(statement: cst.CSTNode) -> list[cst.ImportAlias]:
    names = getattr(statement, "names", ())
    return [] if isinstance(names, cst.ImportStar) else list(names)


class _Find(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        super().__init__()
        self.found: list[SideEffectImport] = []

    def _statement(self, node: cst.Import | cst.ImportFrom) -> None:
        for alias in _aliases(node):
            if _imported(node, alias) in _STILL_NEEDED:
                line = self.get_metadata(PositionProvider, node).start.line
                self.found.append(SideEffectImport(_imported(node, alias), line, code(node)))

    def visit_Import(self, node: cst.Import) -> None:
        self._statement(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._statement(node)


def side_effect_imports(wrapper: MetadataWrapper) -> list[SideEffectImport]:
    """The torch_npu side-effect imports of the wrapped module, wherever they are (its
    positions computed once: the port's own wrapper has them already)."""
    finder = _Find()
    wrapper.visit(finder)
    return finder.found


class _Reads(cst.CSTVisitor):
    """What a ported module still reads of what the imports give (not counting code under
    `if devicekit.device_type() == "npu":`, where devicekit has imported torch_npu)."""

    def __init__(self) -> None:
        super().__init__()
        self.needed: set[str] = set()

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_If(self, node: cst.If) -> bool:
        if not m.matches(node.test, DEVICE_TYPE_GUARD):
            return True
        if node.orelse is not None:
            node.orelse.visit(self)
        return False

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == _TORCH_NPU:
            self.needed.add(_TORCH_NPU)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        text = code(node) if m.matches(node.value, m.Name("torch")) else ""
        if text == "torch.npu":
            self.needed.add(_TORCH_NPU)
        elif text == "torch.cuda":
            self.needed.add(_TRANSFER)


class _Drop(cst.CSTTransformer):
    """Removes the side-effect imports of `drop`, and an `if` or `try` left empty by it."""

    def __init__(self, drop: set[str]) -> None:
        super().__init__()
        self.drop = drop
        self.emptied = 0

    def _keep(self, updated: _ImportT) -> _ImportT | cst.RemovalSentinel:
        kept = [a for a in _aliases(updated) if _imported(updated, a) not in self.drop]
        if len(kept) == len(_aliases(updated)):
            return updated
        if not kept:
            self.emptied += 1
            return cst.RemoveFromParent()
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(names=kept)

    def leave_Import(
        self, original_node: cst.Import, updated_node: cst.Import
    ) -> cst.Import | cst.RemovalSentinel:
        return self._keep(updated_node)

    def leave_ImportFrom(
        self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom
    ) -> cst.ImportFrom | cst.RemovalSentinel:
        return self._keep(updated_node)

    @staticmethod
    def _only_pass(block: cst.BaseSuite) -> bool:
        lines = block.body if isinstance(block, cst.IndentedBlock) else [block]
        return all(
            isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite))
            and all(isinstance(small, cst.Pass) for small in line.body)
            for line in lines
        )

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If | cst.RemovalSentinel:
        # `if torch.__version__ >= "1.8": import torch_npu`; a test that may do something
        # (`if setup():`) stays, and the branch becomes `pass`.
        if (
            self.emptied
            and original.orelse is None
            and self._only_pass(updated.body)
            and not self._only_pass(original.body)
            and not m.findall(original.test, _ACTS)
        ):
            return cst.RemoveFromParent()
        return updated

    def leave_Try(self, original: cst.Try, updated: cst.Try) -> cst.Try | cst.RemovalSentinel:
        # try: import torch_npu / except ImportError: ...; an `else:` or `finally:` stays.
        if (
            self.emptied
            and self._only_pass(updated.body)
            and not self._only_pass(original.body)
            and original.orelse is None
            and original.finalbody is None
        ):
            return cst.RemoveFromParent()
        return updated


def settle(
    ported: cst.Module, found: list[SideEffectImport]
) -> tuple[cst.Module, list[Change], list[Manual]]:
    """`ported` without the side-effect imports nothing needs; the changes that says, and
    a manual item for each one kept because something still needs it."""
    if not found:
        return ported, [], []
    reads = _Reads()
    ported.visit(reads)
    drop = {f.imported for f in found} - reads.needed
    changes = [
        Change(f.line, "torch-npu-import", f.statement, "", ["torch-npu-import"])
        for f in found
        if f.imported in drop
    ]
    manual = [
        Manual(f.line, f.statement, *_STILL_NEEDED[f.imported])
        for f in found
        if f.imported not in drop
    ]
    return (ported.visit(_Drop(drop)) if drop else ported), changes, manual

"""Port one file's source: parse it (source_bytes), rewrite it (the transformer and its
rules), fix the imports, report, and render it back with the file's own bytes."""

import libcst as cst
from libcst.metadata import MetadataWrapper

from devicekit.port import npu_imports
from devicekit.port.facts import Facts
from devicekit.port.imports import add_devicekit, drop_unused, import_uses
from devicekit.port.report import FileReport, grouped
from devicekit.port.source_bytes import ParseFailure, parse, render, too_deep
from devicekit.port.transformer import PortTransformer


def port_module(module: cst.Module, path: str) -> tuple[cst.Module, FileReport]:
    """The ported module and what was changed, left alone and kept in it."""
    wrapper = MetadataWrapper(module)
    facts = Facts()
    wrapper.visit_batched([facts])
    transformer = PortTransformer(wrapper.module, facts)
    ported = wrapper.visit(transformer)
    ported = drop_unused(ported, import_uses(wrapper))
    ported, dropped, still_needed = npu_imports.settle(
        ported, npu_imports.side_effect_imports(wrapper)
    )
    report = FileReport(
        path,
        sorted(transformer.changes() + dropped, key=lambda c: c.line),
        grouped(transformer.manual() + still_needed),
        grouped(transformer.info()),
    )
    return add_devicekit(ported), report


def port_parsed(module: cst.Module, source: bytes, path: str) -> tuple[bytes, FileReport]:
    """Port `module`, parsed from `source`; the new bytes (`source` itself when nothing
    changed). ParseFailure when the tree nests too deeply to be rewritten."""
    try:
        ported, report = port_module(module, path)
        return (render(ported, source, module) if report.changes else source), report
    except RecursionError:
        raise too_deep(source) from None


def port_source(source: bytes, path: str = "<source>") -> tuple[bytes, FileReport]:
    """Port `source`; the new bytes (identical to `source` when nothing changed).
    ParseFailure, a UsageError whose one line starts with `path`, when it cannot be."""
    try:
        return port_parsed(parse(source), source, path)
    except ParseFailure as failure:
        raise ParseFailure(f"{path}: {failure}") from None

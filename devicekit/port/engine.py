"""Port one file's source: parse (libcst), rewrite, fix the imports, report."""

import ast
from typing import Tuple

import libcst as cst
from libcst.metadata import MetadataWrapper

from devicekit.port.facts import Facts
from devicekit.port import npu_imports
from devicekit.port.imports import add_devicekit, drop_unused, import_uses
from devicekit.port.report import FileReport
from devicekit.port.transformer import PortTransformer


class ParseFailure(Exception):
    """A file that cannot be read as Python; the message is one line."""


def parse(source: bytes) -> cst.Module:
    """The concrete syntax tree of `source` (bytes: the encoding cookie is honoured and
    the same bytes come back from `.bytes` for untouched code). Python's own compiler
    checks the source first: its messages name the problem best."""
    try:
        ast.parse(source)
    except SyntaxError as error:
        raise ParseFailure(f"does not parse: {error.msg} (line {error.lineno})") from None
    except ValueError as error:  # null bytes
        raise ParseFailure(f"does not parse: {error}") from None
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        raise ParseFailure(f"does not parse: {error.message} (line {error.raw_line})") from None
    except (UnicodeDecodeError, LookupError) as error:
        raise ParseFailure(f"cannot be decoded: {error}") from None


def port_module(module: cst.Module, path: str) -> Tuple[cst.Module, FileReport]:
    """The ported module and what was changed, left alone and kept in it."""
    wrapper = MetadataWrapper(module)
    facts = Facts()
    wrapper.visit_batched([facts])
    transformer = PortTransformer(wrapper.module, facts)
    ported = wrapper.visit(transformer)
    ported = drop_unused(ported, import_uses(wrapper.module))
    ported, dropped, still_needed = npu_imports.settle(
        ported, npu_imports.side_effect_imports(wrapper.module))
    report = FileReport(path, sorted(transformer.changes() + dropped, key=lambda c: c.line),
                        sorted(transformer.manual() + still_needed, key=lambda i: i.line),
                        transformer.info())
    return add_devicekit(ported), report


def port_source(source: bytes, path: str = "<source>") -> Tuple[bytes, FileReport]:
    """Port `source`; the new bytes (identical to `source` when nothing changed)."""
    module, report = port_module(parse(source), path)
    return (module.bytes if report.changes else source), report

"""A file's bytes as devicekit port reads and writes them: Python's own parser reads the
source first, so a file Python would refuse is refused with Python's message and its line
(a NUL byte, an undecodable byte and an unknown encoding get their own); libcst then parses
it, a file of mixed line endings handed to it with one (libcst fails on some mixes); and
the ported tree is written back with every line the port left alone as it was read, its
line ending included, where libcst would write it otherwise (it drops a form feed that
starts a line, and indented comments after the last statement). A tree too deep for
libcst's recursive visitors is refused with its deepest line.
"""

import ast
import codecs
import difflib
import re
import tokenize
import warnings
from io import BytesIO

import libcst as cst

from devicekit.errors import UsageError

_NEWLINE = re.compile(rb"\r\n|\r|\n")
_LINE_END = (b"\n", b"\r")
# PEP 263: an encoding declared in a comment on line 1, or on line 2 after a comment or
# a blank line 1.
_DECLARATION = re.compile(rb"[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_EMPTY_LINE = re.compile(rb"[ \t\f]*(?:#.*)?")  # blank, or only a comment
_FIX_ENCODING = (
    "save the file as UTF-8, or declare its encoding on line 1 or 2 (# -*- coding: latin-1 -*-)"
)
_TOO_DEEP = "split the expression or the chain of elif/else branches up and run again"


class ParseFailure(UsageError):
    """A file that cannot be read as Python or cannot be ported; the message is one line
    that gives the file's line and what to do."""


def line_at(source: bytes, offset: int) -> int:
    """The line (from 1) of byte `offset` of `source`, with Python's line ends: \\n, \\r\\n
    and a lone \\r."""
    return len(_NEWLINE.findall(source, 0, offset)) + 1


def _first_newline(source: bytes) -> bytes:
    found = _NEWLINE.search(source)
    return found.group() if found else b"\n"


def _one_newline(source: bytes) -> bytes:
    """`source` with every line end like its first one (\\n for a lone \\r, which libcst
    drops at the end of a file); `source` itself where they all are \\n or all \\r\\n."""
    crlf = source.count(b"\r\n")
    if source.count(b"\r") == crlf and (crlf == 0 or source.count(b"\n") == crlf):
        return source
    newline = _first_newline(source)
    return _NEWLINE.sub(b"\n" if newline == b"\r" else newline, source)


def _declared_encoding(source: bytes) -> tuple[str | None, int]:
    """(the encoding a PEP 263 comment declares, its line), or (None, 1)."""
    lines = source.splitlines()[:2]
    for number, line in enumerate(lines, 1):
        found = _DECLARATION.match(line)
        if found:
            return found.group(1).decode("ascii"), number
        if not _EMPTY_LINE.fullmatch(line):
            break
    return None, 1


def _not_decodable(source: bytes) -> str | None:
    """Why `source` cannot be read as text in its declared encoding (else UTF-8), on one
    line with the line of the problem; None when it can."""
    body, skipped = (source[3:], 3) if source.startswith(codecs.BOM_UTF8) else (source, 0)
    encoding, line = _declared_encoding(body)
    try:
        codec = codecs.lookup(encoding or "utf-8").name
    except LookupError:
        return (
            f"declares an encoding Python does not know, {encoding!r} (line {line}): "
            f"{_FIX_ENCODING}"
        )
    if skipped and codec != "utf-8":
        return (
            f"starts with a UTF-8 byte-order mark but declares encoding {encoding!r} "
            f"(line {line}): remove one of the two"
        )
    try:
        body.decode(codec)
    except UnicodeDecodeError as error:
        offset = skipped + error.start
        utf16 = source[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
        return (
            f"is not {'UTF-8' if codec == 'utf-8' else codec} text"
            f"{' (it looks like UTF-16)' if utf16 else ''}: byte 0x{source[offset]:02x} "
            f"at line {line_at(source, offset)} cannot be decoded: {_FIX_ENCODING}"
        )
    return None


def _deepest_line(source: bytes) -> int:
    """The line where `source` nests deepest (its longest statement where Python's own
    parser cannot hold it)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _longest_statement_line(source)
    deepest, line = -1, 1
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        lineno: int | None = getattr(node, "lineno", None)
        if depth > deepest and lineno:
            deepest, line = depth, lineno
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return line


def _longest_statement_line(source: bytes) -> int:
    """The first line of the logical line with the most tokens."""
    best, line, start, count = -1, 1, None, 0
    try:
        for token in tokenize.tokenize(BytesIO(source).readline):
            if start is None:
                start, count = token.start[0], 0
            count += 1
            if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                if count > best:
                    best, line = count, start
                start = None
    except (SyntaxError, tokenize.TokenError, UnicodeDecodeError, ValueError):
        pass
    return max(line, 1)


def too_deep(source: bytes) -> ParseFailure:
    """The failure for a tree too deep for libcst's recursive visitors."""
    return ParseFailure(
        f"nests too deeply for devicekit port (line {_deepest_line(source)}): {_TOO_DEEP}"
    )


def _python_refusal(source: bytes, error: SyntaxError) -> str:
    """The one line for a SyntaxError of Python's parser, with a line number always."""
    message = error.msg or str(error)
    if "null bytes" in message and b"\0" in source:
        line = line_at(source, source.index(b"\0"))
        return (
            f"does not parse: it contains a NUL byte (line {line}): it is not a Python "
            "source file, or it was saved as UTF-16: save it as UTF-8 text"
        )
    if message.startswith("(unicode error)") or "encoding" in message:
        why = _not_decodable(source)
        if why is not None:
            return why
    line = error.lineno or (_declared_encoding(source)[1] if "encoding" in message else 1)
    return f"does not parse: {message} (line {line})"


def check_python(source: bytes, compiled: bool = False) -> None:
    """Raise ParseFailure (one line, with the line number) unless Python's parser reads
    `source`; with `compiled`, unless it compiles (which also refuses `return` outside a
    function). Nothing is run."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning: the user's own business here
            if compiled:
                compile(source, "<file>", "exec", dont_inherit=True)
            else:
                ast.parse(source)
    except SyntaxError as error:
        raise ParseFailure(_python_refusal(source, error)) from None
    except ValueError as error:  # null bytes, before Python 3.11.4
        raise ParseFailure(_python_refusal(source, SyntaxError(str(error)))) from None
    except (RecursionError, MemoryError):
        raise ParseFailure(
            f"does not parse: it nests too deeply for Python's parser (line "
            f"{_deepest_line(source)}): {_TOO_DEEP}"
        ) from None


def _libcst_line(source: bytes, error: cst.ParserSyntaxError) -> int:
    """libcst's line for `error`: its own is 1 for most tokenizer errors; a position in
    the message is better."""
    found = re.search(r"error at (\d+):\d+|at \((\d+), \d+\)", error.message)
    if found:
        return int(found.group(1) or found.group(2))
    if "line continuation" in error.message and b"\\" in source:
        return line_at(source, source.rindex(b"\\"))
    return max(error.raw_line, 1)


def parse(source: bytes) -> cst.Module:
    """The concrete syntax tree of `source` (bytes: the encoding declaration is honoured,
    and render() gives back the same bytes for untouched code). ParseFailure (one line,
    with the line number) when Python or libcst cannot read it."""
    check_python(source)
    text = _one_newline(source)
    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError as error:
        raise ParseFailure(
            f"does not parse with libcst, the parser devicekit port uses, "
            f"though Python reads it: {error.message} (line "
            f"{_libcst_line(text, error)}): port this file by hand"
        ) from None
    except (UnicodeDecodeError, SyntaxError, LookupError) as error:
        # Python itself reads some bytes libcst will not decode (in a comment, say).
        raise ParseFailure(_not_decodable(source) or f"cannot be decoded: {error}") from None
    except (RecursionError, MemoryError):
        raise too_deep(source) from None
    except BaseException as error:
        # libcst's native parser panics on some input (pyo3's PanicException is a
        # BaseException): mixed line endings did, which it no longer sees.
        if type(error).__name__ != "PanicException":
            raise
        found = re.search(r"byte index (\d+)", str(error))
        line = line_at(text, int(found.group(1))) if found else 1
        raise ParseFailure(
            f"does not parse with libcst, the parser devicekit port uses, "
            f"though Python reads it: its parser failed (line {line}): port "
            "this file by hand"
        ) from None


def _key(line: bytes) -> bytes:
    """What a line says, whatever libcst did to it: no line ending, no form feed."""
    return line.rstrip(b"\r\n").replace(b"\f", b"")


def _with_source_lines(ported: bytes, source: bytes) -> bytes:
    """`ported` with each line the port left as it was taken from `source`, its line ending
    and form feeds included. A line the port rewrote keeps the ending of the line it
    replaces; an added one ends like the file's first line."""
    normalised = _one_newline(source) != source
    if not normalised and b"\f" not in source:
        return ported
    newline = _first_newline(source)
    old, new = source.splitlines(keepends=True), ported.splitlines(keepends=True)

    def ending(line: bytes) -> bytes:
        return line[len(line.rstrip(b"\r\n")) :] or newline

    out: list[bytes] = []
    matcher = difflib.SequenceMatcher(
        None, [_key(line) for line in old], [_key(line) for line in new], autojunk=False
    )
    for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
        if tag == "equal":
            out += old[old_start:old_end]
            continue
        endings = [ending(line) for line in old[old_start:old_end]]
        if len(endings) != new_end - new_start:
            endings = [newline] * (new_end - new_start)
        out += [
            line.rstrip(b"\r\n") + end if line.endswith(_LINE_END) else line
            for line, end in zip(new[new_start:new_end], endings, strict=False)
        ]
    for i, line in enumerate(out[:-1]):
        if not line.endswith(_LINE_END):  # the file's last line, no longer last
            out[i] = line + newline
    return b"".join(out)


def _empty_tail(lines: list[bytes]) -> list[bytes]:
    """The blank and comment-only lines that end `lines`."""
    end = len(lines)
    while end and _EMPTY_LINE.fullmatch(_key(lines[end - 1])):
        end -= 1
    return lines[end:]


def _with_source_tail(ported: bytes, original: cst.Module, source: bytes) -> bytes:
    """`ported` ending in the blank and comment lines that end `source`, where libcst's
    tree of it (`original`) lost some: it drops an indented comment after the last
    top-level statement, and blank lines around it (`x = 1\\n\\n  # note`)."""
    tail = _empty_tail(source.splitlines(keepends=True))
    if not tail:
        return ported
    kept = _empty_tail(original.bytes.splitlines(keepends=True))
    if [_key(line) for line in kept] == [_key(line) for line in tail]:
        return ported
    lines = ported.splitlines(keepends=True)
    head = lines[: len(lines) - len(kept)]
    if [_key(line) for line in lines[len(head) :]] != [_key(line) for line in kept]:
        return ported  # the port changed the end: leave it as it is
    if head and not head[-1].endswith(_LINE_END):
        head[-1] += _first_newline(source)
    return b"".join(head + tail)


def render(module: cst.Module, source: bytes, original: cst.Module | None = None) -> bytes:
    """The bytes of `module`, the ported tree of `source` (parsed as `original`): each line
    that the port left as it was is `source`'s own line, byte for byte, where libcst would
    write it otherwise (a file of mixed line endings is parsed with one; libcst drops a form
    feed that starts a line, and comments and blank lines at the end of some files)."""
    ported = module.bytes
    if original is not None:
        ported = _with_source_tail(ported, original, source)
    return _with_source_lines(ported, source)

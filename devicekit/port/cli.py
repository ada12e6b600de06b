"""`devicekit port PATH...`: print, write or check the ported form of CUDA-only scripts.

Every input is read and parsed before anything is written: a path that does not exist or
a file that does not parse is named on one line of stderr, nothing is written, and the
exit code is 2. Otherwise the exit code is 1 when something needs a change by hand (and
for --check, when anything would change), else 0.
"""

import argparse
import difflib
import errno
import json
import os
import stat
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple, NoReturn

import libcst as cst

from devicekit import writable
from devicekit.errors import EXIT_USAGE, UsageError, one_line
from devicekit.port.engine import port_parsed
from devicekit.port.report import FileReport, human, to_json
from devicekit.port.source_bytes import ParseFailure, parse

_SKIPPED_DIRS = {"__pycache__", "node_modules", "site-packages"}


class BadInput(UsageError):
    """Input that cannot be ported (the message names it, on one line)."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad command line is one line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        print(
            f"{self.prog}: error: {one_line(message)} (see: {self.prog} --help)",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(EXIT_USAGE)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="devicekit port",
        description="Rewrite CUDA-only PyTorch scripts onto devicekit, so that they run on "
        "NVIDIA GPUs, Ascend NPUs and CPUs. Prints a unified diff and a summary "
        "unless told to write.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help=".py files or folders of them")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the files in place")
    mode.add_argument(
        "--out",
        metavar="DIR",
        help="write ported copies of every file under DIR, keeping the layout",
    )
    mode.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 when CUDA-only code remains"
    )
    parser.add_argument("--report", metavar="FILE.json", help="also write a JSON report")
    return parser


def _python_files(root: Path) -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".")
            and d not in _SKIPPED_DIRS
            and not (Path(folder, d) / "pyvenv.cfg").exists()
        )
        found += [
            Path(folder, f)
            for f in sorted(files)
            if f.endswith(".py") and not _special(Path(folder, f))
        ]
    return found


def _special(path: Path) -> bool:
    """Whether `path` is a pipe, socket or device: reading it could wait forever."""
    try:
        return not stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False  # a dangling link: reading it says why


def collect(paths: Sequence[str]) -> list[tuple[Path, Path]]:
    """(file, the root it was found under) for every .py file the paths name."""
    found, seen = [], set()
    for text in paths:
        if not text:  # Path("") is the current folder: `port "$UNSET"` would port all of it
            raise BadInput("'': an empty path: give .py files or folders of them")
        path = Path(text)
        try:
            if not path.exists():
                raise BadInput(f"{text}: no such file or directory")
        except (OSError, ValueError) as error:  # a NUL in the name, a name too long
            raise BadInput(
                f"{text}: not a usable path ({getattr(error, 'strerror', None) or error})"
            ) from None
        if path.is_dir():
            files = _python_files(path)
            if not files:
                raise BadInput(f"{text}: no .py files in this folder")
            root = path
        else:
            files, root = [path], path.parent
        for file in files:
            if file.resolve() not in seen:
                seen.add(file.resolve())
                found.append((file, root))
    return found


# (file, the root it was found under, its bytes, its parsed module)
_Read = tuple[Path, Path, bytes, cst.Module]


def _read_all(files: list[tuple[Path, Path]]) -> list[_Read]:
    """[(file, root, original bytes, parsed module)] or BadInput for the first that fails."""
    parsed: list[_Read] = []
    for file, root in files:
        try:
            source = file.read_bytes()
        except OSError as error:
            raise BadInput(f"{file}: cannot be read: {error.strerror}") from None
        try:
            parsed.append((file, root, source, parse(source)))
        except ParseFailure as failure:
            raise BadInput(f"{file}: {failure}") from None
    return parsed


def _destinations(files: list[_Read], out: str | None) -> dict[Path, Path]:
    """Where --out writes each file: DIR/<its path below the common root of the inputs>."""
    if out is None:
        return {}
    target = Path(out)
    if target.exists() and not target.is_dir():
        raise BadInput(f"{out}: --out must be a folder")
    base = Path(os.path.commonpath([str(root.resolve()) for _, root, _, _ in files]))
    destinations = {file: target / file.resolve().relative_to(base) for file, _, _, _ in files}
    sources = {file.resolve() for file, _, _, _ in files}
    probed: set[str] = set()
    for destination in destinations.values():
        if destination.resolve() in sources:
            raise BadInput(f"{destination}: --out would overwrite an input (use --write)")
        if destination.is_dir():
            raise BadInput(f"{destination}: --out cannot write it: a folder stands there")
        folder, _ = writable.nearest_existing(destination.parent)
        if not os.path.isdir(folder):
            raise BadInput(f"{destination}: --out cannot write it: {folder} is a file")
        if folder not in probed:
            probed.add(folder)
            _holds_files(
                folder, f"{destination}: --out cannot write it: {folder} cannot hold files"
            )
    return destinations


def _holds_files(folder: str | Path, refusal: str) -> None:
    """BadInput `refusal (why)` unless a file can be made in `folder`."""
    reason = writable.cannot_hold_files(folder)
    if reason is not None:
        raise BadInput(f"{refusal} ({reason})")


def _write(path: Path, data: bytes, like: Path | None = None) -> None:
    """Write `data` to `path` atomically (mode copied from `like`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        if like is not None:
            os.chmod(temporary, like.stat().st_mode & 0o7777)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _diff(path: str, before: bytes, after: bytes, encoding: str) -> str:
    # Split as Python does (str.splitlines would also split at form feeds and more).
    old = [line.decode(encoding, errors="replace") for line in before.splitlines(True)]
    new = [line.decode(encoding, errors="replace") for line in after.splitlines(True)]
    lines = list(difflib.unified_diff(old, new, fromfile=path, tofile=path))
    return "".join(
        line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n"
        for line in lines
    )


class _Ported(NamedTuple):
    file: Path
    source: bytes
    data: bytes  # the ported bytes (the source itself when nothing changed)
    encoding: str
    report: FileReport


def _exit_code(reports: list[FileReport], check: bool) -> int:
    """1 when something needs a hand (for --check: or would change), else 0."""
    return 1 if any(r.manual or (check and r.changes) for r in reports) else 0


def _writable(text: str, flag: str, folder: bool = False) -> Path:
    """The path `flag` names, checked before anything is written: a folder (`folder`) or a
    file that can be written there, in a folder that exists or can be made."""
    if not text:
        raise BadInput(f"{flag} '': give a {'folder' if folder else 'file'}")
    path = Path(text)
    try:
        try:
            os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            pass
        if path.is_dir() != folder and path.exists():
            raise BadInput(f"{text}: {flag} must {'be a folder' if folder else 'name a file'}")
        existing = path if folder else path.parent
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise BadInput(f"{text}: {flag} cannot be written: {existing} is not a folder")
        _holds_files(existing, f"{text}: {flag} cannot be written: {existing} cannot hold files")
        longest = os.pathconf(existing, "PC_NAME_MAX")
        if any(len(os.fsencode(part)) > longest for part in path.parts):
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
    except (OSError, ValueError) as error:  # a NUL in the name, a name too long
        raise BadInput(
            f"{text}: {flag} is not a usable path ({getattr(error, 'strerror', None) or error})"
        ) from None
    return path


def _write_or_say(path: Path, data: bytes, like: Path | None = None) -> None:
    """_write, or BadInput naming `path` (a folder made read-only meanwhile, a full disk)."""
    try:
        _write(path, data, like)
    except OSError as error:
        raise BadInput(f"{path}: cannot be written: {error.strerror or error}") from None


def run(args: argparse.Namespace) -> int:
    """Port what `args` names; the exit code. Everything is read, parsed and ported in
    memory, and every place written to checked, before the first byte is written."""
    files = _read_all(collect(args.paths))
    report_path = _writable(args.report, "--report") if args.report is not None else None
    if report_path is not None and report_path.resolve() in {f.resolve() for f, *_ in files}:
        raise BadInput(f"{args.report}: --report would overwrite an input")
    if report_path is not None and report_path.suffix == ".py":  # `--report a.py b.py`
        raise BadInput(
            f"{args.report}: --report would write JSON over a Python file: name a .json file"
        )
    if args.out is not None:
        out = _writable(args.out, "--out", folder=True).resolve()
        if report_path is not None and report_path.resolve() in (out, *out.parents):
            raise BadInput(
                f"{args.report}: --report would stand where --out {args.out} "
                "writes a folder: name a file outside it, or in it"
            )
    destinations = _destinations(files, args.out)
    results = []
    for file, _, source, module in files:
        try:
            data, report = port_parsed(module, source, str(file))
        except ParseFailure as failure:
            raise BadInput(f"{file}: {failure}") from None
        results.append(_Ported(file, source, data, module.encoding, report))
    for item in results:
        if args.write and item.report.changes and _special(item.file):
            raise BadInput(
                f"{item.file}: --write rewrites regular files only (this is a pipe "
                "or a device): use --out DIR"
            )
    if args.write:  # each file is replaced by a new one made beside it
        for folder in sorted({item.file.parent for item in results if item.report.changes}):
            _holds_files(folder, f"{folder}: --write cannot replace files here")
    reports = [r.report for r in results]
    code = _exit_code(reports, args.check)
    for item in results:
        if args.write and item.report.changes:
            _write_or_say(item.file, item.data, like=item.file)
            item.report.output = str(item.file)
        elif args.out is not None:
            _write_or_say(destinations[item.file], item.data, like=item.file)
            item.report.output = str(destinations[item.file])
        elif not (args.write or args.check) and item.report.changes:
            sys.stdout.write(_diff(str(item.file), item.source, item.data, item.encoding))
    if report_path is not None:
        mode = "check" if args.check else "write" if args.write else "out" if args.out else "diff"
        _write_or_say(
            report_path, (json.dumps(to_json(reports, mode, code), indent=2) + "\n").encode()
        )
    print(human(reports, pending=args.check))
    return code


def main(argv: list[str]) -> int:
    """`devicekit port` with `argv` (the arguments after "port"); the exit code."""
    args = _parser().parse_intermixed_args(argv)  # `port a.py --write b.py` too
    try:
        return run(args)
    except UsageError as error:
        print(f"devicekit port: error: {error}", file=sys.stderr, flush=True)
        return EXIT_USAGE

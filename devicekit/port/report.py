"""What `devicekit port` found in each file, as JSON and as a human summary."""

import dataclasses
from collections import Counter
from typing import TypeVar


@dataclasses.dataclass
class Change:
    """One rewrite: the source before and after (the outermost rewritten expression or
    statement); `rules` also names the rewrites nested inside it."""

    line: int
    rule: str
    before: str
    after: str
    rules: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Manual:
    """A construct left alone: it needs a change by hand. The same reason at other lines of
    the file is one item: `also` holds those lines, `construct` each distinct construct."""

    line: int
    construct: str
    why: str
    fix: str
    also: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Info:
    """A construct kept on purpose, reported for the reader (grouped as Manual is)."""

    line: int
    construct: str
    note: str
    also: list[int] = dataclasses.field(default_factory=list)


_Item = TypeVar("_Item", Manual, Info)


def grouped(items: list[_Item]) -> list[_Item]:
    """One item per reason, at its first line: one apex item with its lines, not fifteen."""
    first: dict[tuple[str, ...], _Item] = {}
    for item in sorted(items, key=lambda i: i.line):
        reason = (item.why, item.fix) if isinstance(item, Manual) else (item.note,)
        if reason not in first:
            first[reason] = dataclasses.replace(item, also=[])
            continue
        kept = first[reason]
        if item.line != kept.line and item.line not in kept.also:
            kept.also.append(item.line)
        if item.construct not in kept.construct.split("; "):
            kept.construct += f"; {item.construct}"
    return list(first.values())


@dataclasses.dataclass
class FileReport:
    """The outcome for one file."""

    path: str
    changes: list[Change] = dataclasses.field(default_factory=list)
    manual: list[Manual] = dataclasses.field(default_factory=list)
    info: list[Info] = dataclasses.field(default_factory=list)
    output: str | None = None

    def to_json(self) -> dict[str, object]:
        """This file's entry in the JSON report."""
        return {
            "path": self.path,
            "output": self.output,
            "changed": bool(self.changes),
            "changes": [dataclasses.asdict(c) for c in self.changes],
            "manual": [dataclasses.asdict(m) for m in self.manual],
            "info": [dataclasses.asdict(i) for i in self.info],
        }


def summary(files: list[FileReport]) -> dict[str, object]:
    """Counts over every file: files, changed files, changes, manual and info items, and
    rewrites per rule (nested ones included)."""
    by_rule = Counter(rule for f in files for c in f.changes for rule in c.rules)
    return {
        "files": len(files),
        "files_changed": sum(bool(f.changes) for f in files),
        "changes": sum(len(f.changes) for f in files),
        "manual": sum(len(f.manual) for f in files),
        "info": sum(len(f.info) for f in files),
        "by_rule": dict(sorted(by_rule.items())),
    }


def to_json(files: list[FileReport], mode: str, exit_code: int) -> dict[str, object]:
    """The machine-readable report (`--report FILE.json`)."""
    counts = summary(files)
    counts["exit_code"] = exit_code
    return {
        "tool": "devicekit port",
        "version": 1,
        "mode": mode,
        "files": [f.to_json() for f in files],
        "summary": counts,
    }


def _also(lines: list[int]) -> str:
    if not lines:
        return ""
    return f" (also line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))})"


def _one_line(code: str) -> str:
    return " ".join(code.split())


def human(files: list[FileReport], pending: bool) -> str:
    """The summary printed after the diff: manual items (file:line, construct, why, fix),
    kept constructs, then the counts. `pending` lists every change too (for --check)."""
    lines = []
    for f in files:
        if pending:
            lines += [
                f"{f.path}:{c.line}: {c.rule}: {_one_line(c.before)} -> {_one_line(c.after)}"
                for c in f.changes
            ]
        for m in f.manual:
            lines.append(
                f"{f.path}:{m.line}: manual{_also(m.also)}: {m.construct}: {m.why}. Fix: {m.fix}"
            )
        for i in f.info:
            lines.append(f"{f.path}:{i.line}: kept{_also(i.also)}: {i.construct}: {i.note}")
    counts = summary(files)
    verb = "to change" if pending else "changed"
    lines.append(
        f"devicekit port: {counts['files']} file(s), {counts['files_changed']} "
        f"{verb}, {counts['changes']} change(s), {counts['manual']} manual item(s), "
        f"{counts['info']} kept as harmless"
    )
    return "\n".join(lines)

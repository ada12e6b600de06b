"""`npu-operator`: torch_npu operators the user's own files name (`torch_npu.<name>`,
`torch.ops.npu.<name>[.overload]`, `from torch_npu import <name>`) that torch_npu's operator
list lacks, read from the source, so that a typo in a branch only an NPU takes is found
here; and, for the report's info line, the listed ones they name (`supported`).

The run cannot see these operators: the npu stand-in's references of them dispatch torch's
own operators, and without it an NPU-only branch does not run. Only operator-looking names
count: those starting with `npu_`, those the list has, and any name under torch.ops.npu;
torch_npu's modules and attributes (`torch_npu.npu`, `torch_npu.optim`, `__version__`) do
not. A name the file assigns to torch_npu itself is the file's own, not torch_npu's.
"""

import ast
import dataclasses
import difflib
from collections.abc import Iterable, Iterator
from pathlib import Path

from devicekit.preflight.checks.base import Context, Finding
from devicekit.preflight.recording import Recording

KIND = "npu-operator"
ADVICE = (
    "correct the name: on the NPU a name torch_npu lacks raises AttributeError (ImportError "
    "where it is imported); --ops FILE checks against the release you target"
)

# Functions the wheel sets on torch_npu that are not operators of its list
# (torch_npu/_inductor/fx_passes/pattern_match/npu_fusion_attention_graph.py:171).
_PYTHON_FUNCTIONS = frozenset({"npu_fusion_attention_graph"})


@dataclasses.dataclass(frozen=True)
class _Use:
    """One place a file names a torch_npu operator."""

    written: str  # as the source names it: "torch_npu.npu_rms_nrom", "torch.ops.npu.x.default"
    name: str  # as torch_npu's list has it, less "npu::": "npu_rms_norm", "npu_format_cast.Tensor"
    listed: bool
    file: str
    line: int


@dataclasses.dataclass
class Supported:
    """A listed torch_npu operator the user's files name, and where: (file, line, how many
    times on that line), in the order of the files and their lines."""

    name: str
    sites: list[tuple[str, int, int]]

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "sites": [{"file": f, "line": line, "count": n} for f, line, n in self.sites],
        }


def _packets(ops: frozenset[str]) -> frozenset[str]:
    """The names torch_npu exports (torch_npu.<name>, torch.ops.npu.<name>): each operator of
    the npu namespace, whatever its overloads."""
    return frozenset(op[5:].split(".", 1)[0] for op in ops if op.startswith("npu::"))


def _aliases(tree: ast.AST) -> tuple[set[str], set[str], dict[str, tuple[str, int]]]:
    """(the names torch_npu is bound to, those torch is bound to, {local name: (the name
    imported from torch_npu, the import's line)})."""
    npu_names, torch = set(), set()
    imported: dict[str, tuple[str, int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".", 1)[0]
                if alias.asname and alias.name != top:
                    continue  # `import torch_npu.npu as n` binds the submodule
                if top == "torch_npu":
                    npu_names.add(alias.asname or top)
                elif top == "torch":
                    torch.add(alias.asname or top)
        elif isinstance(node, ast.ImportFrom) and node.module == "torch_npu" and not node.level:
            for alias in node.names:
                imported[alias.asname or alias.name] = (alias.name, node.lineno)
    return npu_names, torch, imported


def _overload(node: ast.Attribute, parents: dict[ast.AST, ast.AST], ops: frozenset[str]) -> str:
    """The overload after torch.ops.npu.<name> at `node`: "default", a listed one, or ""."""
    parent = parents.get(node)
    if not isinstance(parent, ast.Attribute) or parent.value is not node:
        return ""
    attr = parent.attr
    return attr if attr == "default" or f"npu::{node.attr}.{attr}" in ops else ""


def _uses_in(path: str, tree: ast.AST, ops: frozenset[str]) -> Iterator[_Use]:
    """The torch_npu operators `tree` (the file at `path`) names, in no particular order."""
    packets = _packets(ops)
    npu_names, torch, imported = _aliases(tree)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    own = {  # names the file sets on torch_npu itself
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and not isinstance(node.ctx, ast.Load)
        and isinstance(node.value, ast.Name)
        and node.value.id in npu_names
    }

    def looks_like(name: str) -> bool:
        return (name.startswith("npu_") or name in packets) and name not in _PYTHON_FUNCTIONS

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            base = node.value
            if isinstance(base, ast.Name) and base.id in npu_names:
                if looks_like(node.attr) and node.attr not in own:
                    yield _Use(
                        f"torch_npu.{node.attr}",
                        node.attr,
                        node.attr in packets,
                        path,
                        node.lineno,
                    )
            elif (
                isinstance(base, ast.Attribute)
                and base.attr == "npu"
                and isinstance(base.value, ast.Attribute)
                and base.value.attr == "ops"
                and isinstance(base.value.value, ast.Name)
                and base.value.value.id in torch
            ):
                overload = _overload(node, parents, ops)
                written = f"torch.ops.npu.{node.attr}" + (f".{overload}" if overload else "")
                if overload:
                    entry = f"npu::{node.attr}" + ("" if overload == "default" else f".{overload}")
                    name, listed = entry[5:], entry in ops
                else:
                    name, listed = node.attr, node.attr in packets
                yield _Use(written, name, listed, path, node.lineno)
    for local, (name, line) in imported.items():
        if not looks_like(name):
            continue
        if name not in packets:  # the import itself fails
            yield _Use(f"torch_npu.{name}", name, False, path, line)
            continue
        lines = [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Name) and node.id == local and isinstance(node.ctx, ast.Load)
        ]
        for at in lines or [line]:
            yield _Use(f"torch_npu.{name}", name, True, path, at)


def _uses(scripts: Iterable[str], ops: frozenset[str]) -> list[_Use]:
    """Every torch_npu operator the files name, by file (in the order given), then line."""
    out: list[_Use] = []
    for path in scripts:
        try:
            tree = ast.parse(Path(path).read_bytes(), filename=path)
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # unreadable, or too deeply nested for ast: Python could not run it either
        out.extend(sorted(_uses_in(path, tree, ops), key=lambda use: use.line))
    return out


def _counted(uses: Iterable[_Use]) -> dict[tuple[str, str, str, int], int]:
    """{(as written, as listed, file, line): how many uses}, in the order of `uses`."""
    counts: dict[tuple[str, str, str, int], int] = {}
    for use in uses:
        key = (use.written, use.name, use.file, use.line)
        counts[key] = counts.get(key, 0) + 1
    return counts


def _closest(name: str, ops: frozenset[str]) -> str:
    """What torch_npu has instead of `name` ("npu_rms_nrom", "npu_x.default"): the listed
    operator nearest it, or the overloads of its operator; "" when nothing is near."""
    packets = _packets(ops)
    base = name.split(".", 1)[0]
    if base in packets:
        overloads = sorted(
            op.partition(".")[2] or "default" for op in ops if op.split(".", 1)[0] == f"npu::{base}"
        )
        return f"; its overloads there: {', '.join(overloads)}"
    close = difflib.get_close_matches(base, sorted(packets), n=1, cutoff=0.75)
    return f"; the closest it has: {close[0]}" if close else ""


def findings(recording: Recording, context: Context) -> list[Finding]:
    unknown = (use for use in _uses(context.scripts, context.npu_ops) if not use.listed)
    return [
        Finding(
            KIND,
            written,
            path,
            line,
            [f"{path}:{line}"],
            count,
            f"{written} is not an operator of torch_npu {context.torch_npu}"
            + _closest(name, context.npu_ops),
        )
        for (written, name, path, line), count in _counted(unknown).items()
    ]


def supported(context: Context) -> list[Supported]:
    """The listed torch_npu operators the user's files name, each with its sites, in the
    order they first appear."""
    grouped: dict[str, Supported] = {}
    listed = (use for use in _uses(context.scripts, context.npu_ops) if use.listed)
    for (_, name, path, line), count in _counted(listed).items():
        grouped.setdefault(name, Supported(name, [])).sites.append((path, line, count))
    return list(grouped.values())

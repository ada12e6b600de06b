"""The house rules a reader relies on to find things: the library's modules form floors (each
imports only its own floor and the ones below) with no import circle; every file says on its
first line what it holds; no file of the library or the trainer runs past 400 lines.

Imports are read from the source (ast), all of them: at the top, inside functions and under
TYPE_CHECKING. `from package import name` counts as an import of package.name where that is a
module, else of the package. Importing a package's submodule runs the package's __init__
first; that is Python's doing, not an import a module writes, and is not counted.
"""

import ast
from pathlib import Path

from support.paths import REPO

LIBRARY = REPO / "devicekit"
MAX_LINES = 400

# Bottom to top. A module's floor is that of the longest name here its own name starts with
# ("devicekit" itself stands for its __init__ alone: a new module must be placed).
FLOORS: tuple[tuple[str, ...], ...] = (
    # What everything may use: errors, and small tools with no devicekit import.
    (
        "devicekit.atomic_write",
        "devicekit.errors",
        "devicekit.network",
        "devicekit.seeding",
        "devicekit.workers",
        "devicekit.writable",
    ),
    ("devicekit.kinds",),
    ("devicekit.environments",),
    # Who this process is and on what: the chosen kind and launch, the rendezvous, the npu
    # stand-in's registrations.
    ("devicekit.runtime", "devicekit.rendezvous", "devicekit.simulate"),
    # The flat API, one module per subject.
    (
        "devicekit.accelerator",
        "devicekit.amp",
        "devicekit.distributed",
        "devicekit.ddp",
        "devicekit.sharding",
        "devicekit.compiling",
        "devicekit.checkpoint",
        "devicekit.checkpoint_files",
        "devicekit.sharded_checkpoint",
        "devicekit.profiler",
        "devicekit.processes",
        "devicekit.forkserver_preload",
    ),
    # The package itself: `import devicekit` gives the flat API.
    ("devicekit",),
    # The commands.
    (
        "devicekit.__main__",
        "devicekit.check",
        "devicekit.doctor",
        "devicekit.port",
        "devicekit.preflight",
        "devicekit.simulate.command",
    ),
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(path): path for path in sorted(LIBRARY.rglob("*.py"))}


def _imports(name: str) -> set[str]:
    """The library modules `name` imports (see the module docstring)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = alias.name
                while target and target not in MODULES:
                    target = target.rpartition(".")[0]
                found.add(target)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.add(submodule if submodule in MODULES else source)
    return {target for target in found if target in MODULES and target != name}


IMPORTS = {name: _imports(name) for name in MODULES}


def floor(name: str) -> int:
    """The floor of module `name`: that of the longest prefix in FLOORS."""
    best, best_length = None, -1
    for level, prefixes in enumerate(FLOORS):
        for prefix in prefixes:
            covers = name == prefix or (prefix != "devicekit" and name.startswith(prefix + "."))
            if covers and len(prefix) > best_length:
                best, best_length = level, len(prefix)
    assert best is not None, f"{name} stands on no floor: add it to FLOORS in {__file__}"
    return best


def _circles() -> list[list[str]]:
    """The import circles: strongly connected parts of the import graph (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in IMPORTS[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            part = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                part.append(member)
                if member == module:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    for module in MODULES:
        if module not in index:
            visit(module)
    return circles


def test_the_library_has_no_import_circle():
    circles = _circles()
    assert circles == [], "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_no_library_module_imports_one_on_a_floor_above_it():
    upward = [
        f"{name} (floor {floor(name)}) imports {target} (floor {floor(target)})"
        for name, targets in sorted(IMPORTS.items())
        for target in sorted(targets)
        if floor(target) > floor(name)
    ]
    assert upward == [], "upward imports:\n" + "\n".join(upward)


def _python_files():
    for folder in ("devicekit", "trainer", "models", "benchmarks", "examples", "launch"):
        yield from sorted((REPO / folder).rglob("*.py"))
    yield REPO / "main.py"


def test_every_file_says_first_what_it_holds():
    silent = []
    for path in _python_files():
        body = ast.parse(path.read_text(encoding="utf-8")).body
        if not (body and isinstance(body[0], ast.Expr) and ast.get_docstring(ast.Module(body, []))):
            silent.append(str(path.relative_to(REPO)))
    assert silent == [], "no docstring first, saying what the file holds:\n" + "\n".join(silent)


def test_no_file_of_the_library_or_the_trainer_runs_past_400_lines():
    files = [*LIBRARY.rglob("*.py"), *(REPO / "trainer").rglob("*.py"), REPO / "main.py"]
    long = {
        str(path.relative_to(REPO)): count
        for path in files
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, "\n".join(f"{path}: {count} lines" for path, count in sorted(long.items()))

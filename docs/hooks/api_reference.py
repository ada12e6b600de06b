"""mkdocs hook: the API reference documents devicekit's public API, all of it and only it.

The build fails, naming every offender at once, when a name in `devicekit.__all__` has no
docstring of its own, or when the `::: devicekit.NAME` entries of docs/reference.md are not
exactly the names in `__all__`. The package is read statically with griffe, as mkdocstrings
reads it, from the folder that holds mkdocs.yml: nothing is imported.
"""

import re
from pathlib import Path

import griffe
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError

PACKAGE = "devicekit"
REFERENCE_PAGE = "reference.md"

# mkdocstrings' syntax: `::: identifier` at the start of a line, outside code blocks.
_AUTODOC = re.compile(r"^ {0,3}::: *(\S+)")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def load_package(package: str, search_path: Path) -> griffe.Module:
    """`package` as griffe reads it from the sources under `search_path`, and only there
    (not an installed copy, not a folder of that name in the current directory)."""
    try:
        loaded = griffe.load(package, search_paths=[search_path], try_relative_path=False)
    except ImportError:  # griffe says ImportError where it finds no such package
        raise PluginError(f"no package {package} under {search_path}") from None
    if not isinstance(loaded, griffe.Module):
        raise PluginError(f"{package} is not a package under {search_path}")
    return loaded


def public_names(module: griffe.Module) -> list[str]:
    """The names in `module.__all__`, in its order."""
    if module.exports is None:
        raise PluginError(f"{module.path} has no __all__: its public names cannot be checked")
    return [str(name) for name in module.exports]


def undocumented(module: griffe.Module) -> list[str]:
    """The names in `module.__all__` that have no docstring of their own: missing, empty,
    or not defined at all. A dataclass's generated `Name(field, ...)` text does not count,
    nor does a docstring inherited from a base class: griffe reads the source."""
    missing = []
    for name in public_names(module):
        member = module.members.get(name)
        if member is None:
            missing.append(f"{module.path}.{name} (in __all__ but not defined)")
            continue
        try:
            docstring = member.docstring  # an alias (an imported name) reads its target's
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            missing.append(f"{module.path}.{name} (its definition cannot be found)")
            continue
        if docstring is None or not docstring.value.strip():
            missing.append(f"{module.path}.{name}")
    return missing


def reference_identifiers(markdown: str) -> list[str]:
    """The identifiers of the `::: identifier` lines of a page, in order, skipping fenced
    code blocks (where such a line is an example, not an entry)."""
    identifiers = []
    fence = ""
    for line in markdown.splitlines():
        opening = _FENCE.match(line)
        if opening:
            marker = opening.group(1)
            if not fence:
                fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence):
                fence = ""
            continue
        entry = _AUTODOC.match(line)
        if entry and not fence:
            identifiers.append(entry.group(1))
    return identifiers


def reference_mismatches(identifiers: list[str], package: str, public: list[str]) -> list[str]:
    """What is wrong with a reference page whose entries are `identifiers`, when it should
    hold `package.NAME` once for every NAME in `public`: one line per problem."""
    expected = [f"{package}.{name}" for name in public]
    problems = [
        f"{name} is public (in {package}.__all__) but not in the reference"
        for name in expected
        if name not in identifiers
    ]
    seen: set[str] = set()
    for identifier in identifiers:
        if identifier in seen:
            problems.append(f"{identifier} is in the reference twice")
        elif identifier not in expected:
            problems.append(
                f"{identifier} is in the reference but is not a public name "
                f"(the reference names {package}.NAME for each NAME in {package}.__all__)"
            )
        seen.add(identifier)
    return problems


def check(package: str, search_path: Path, reference: Path) -> list[str]:
    """Every problem of `package` (under `search_path`) and its reference page, one line
    each: public names without a docstring, and the page's entries that are not
    `__all__`."""
    module = load_package(package, search_path)
    public = public_names(module)
    problems = [f"{name} has no docstring" for name in undocumented(module)]
    identifiers = reference_identifiers(reference.read_text(encoding="utf-8"))
    mismatches = reference_mismatches(identifiers, package, public)
    problems += [f"{reference.name}: {problem}" for problem in mismatches]
    return problems


def on_pre_build(config: MkDocsConfig) -> None:
    """mkdocs calls this before each build (and each rebuild of `mkdocs serve`)."""
    root = Path(config.config_file_path).parent
    problems = check(PACKAGE, root, Path(config.docs_dir) / REFERENCE_PAGE)
    if problems:
        raise PluginError(
            f"the API reference does not cover {PACKAGE}'s public API:\n"
            + "\n".join(f"  - {problem}" for problem in problems)
        )

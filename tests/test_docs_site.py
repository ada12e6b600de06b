"""The documentation site's API check (docs/hooks/api_reference.py, an mkdocs hook).

The reference page names exactly the public API, and the hook that keeps it so flags a
public name without a docstring of its own. The real site's `mkdocs build --strict` is a
step of .ci/run, not a test; the slow test here builds a tiny site of its own.
"""

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import devicekit

ROOT = Path(__file__).resolve().parents[1]
HOOK = ROOT / "docs" / "hooks" / "api_reference.py"
REFERENCE = ROOT / "docs" / "reference.md"
BUILD_TIMEOUT_S = 120


def _load_hook():
    spec = importlib.util.spec_from_file_location("api_reference", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hook = _load_hook()


def _package(root, name, sources):
    """Write the package `name` under `root`: {relative file name: source}."""
    for relative, source in sources.items():
        path = root / name / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")


def test_reference_lists_exactly_the_public_api():
    identifiers = hook.reference_identifiers(REFERENCE.read_text(encoding="utf-8"))
    assert len(identifiers) == len(set(identifiers))
    assert sorted(identifiers) == sorted(f"devicekit.{name}" for name in devicekit.__all__)
    # griffe reads the same __all__ from the source, and every name has a docstring.
    assert hook.check("devicekit", ROOT, REFERENCE) == []


def test_undocumented_function_and_dataclass_are_flagged(tmp_path):
    _package(
        tmp_path,
        "synthetic",
        {
            "__init__.py": '''
                import dataclasses

                from synthetic.impl import Base, imported


                def documented():
                    """Has one."""


                def bare():
                    pass


                @dataclasses.dataclass
                class Fields:
                    """Has one too."""

                    x: int


                @dataclasses.dataclass
                class BareFields:
                    x: int


                class Inherits(Base):
                    pass


                __all__ = [
                    "Base", "BareFields", "Fields", "Inherits", "bare", "documented",
                    "imported", "nowhere",
                ]
            ''',
            "impl.py": '''
                def imported():
                    """Documented where it is defined."""


                class Base:
                    """A base class's docstring is not its subclasses'."""
            ''',
        },
    )
    module = hook.load_package("synthetic", tmp_path)
    assert hook.undocumented(module) == [
        "synthetic.BareFields",
        "synthetic.Inherits",
        "synthetic.bare",
        "synthetic.nowhere (in __all__ but not defined)",
    ]


def test_reference_entries_are_compared_with_all():
    page = textwrap.dedent(
        """
        # API

        ::: pkg.one

        ```markdown
        ::: pkg.example_in_a_code_block
        ```

        ::: pkg.private
        ::: pkg.one
        """
    )
    identifiers = hook.reference_identifiers(page)
    assert identifiers == ["pkg.one", "pkg.private", "pkg.one"]
    assert hook.reference_mismatches(identifiers, "pkg", ["one", "two"]) == [
        "pkg.two is public (in pkg.__all__) but not in the reference",
        "pkg.private is in the reference but is not a public name "
        "(the reference names pkg.NAME for each NAME in pkg.__all__)",
        "pkg.one is in the reference twice",
    ]
    assert hook.reference_mismatches(["pkg.one", "pkg.two"], "pkg", ["one", "two"]) == []


def _build(project):
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict"],
        cwd=project,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )


@pytest.mark.slow
def test_build_fails_naming_an_undocumented_public_name(tmp_path):
    # A site laid out as the real one (the package beside mkdocs.yml, the page at
    # docs/reference.md) with the real hook; no mkdocstrings, which the check does not need.
    (tmp_path / "mkdocs.yml").write_text(
        f"site_name: tiny\nhooks:\n  - {HOOK}\n",
        encoding="utf-8",
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# tiny\n", encoding="utf-8")
    (tmp_path / "docs" / "reference.md").write_text(
        "# API\n\n::: devicekit.Options\n\n::: devicekit.run\n", encoding="utf-8"
    )
    init = '''
        import dataclasses


        @dataclasses.dataclass
        class Options:
            {docstring}
            steps: int = 1


        def run():
            """Run it."""


        __all__ = ["Options", "run"]
    '''
    _package(tmp_path, "devicekit", {"__init__.py": init.format(docstring="")})

    failed = _build(tmp_path)
    assert failed.returncode != 0, failed.stderr
    assert "devicekit.Options has no docstring" in failed.stderr
    assert "devicekit.run" not in failed.stderr

    documented = init.format(docstring='"""What to run."""')
    _package(tmp_path, "devicekit", {"__init__.py": documented})
    built = _build(tmp_path)
    assert built.returncode == 0, built.stderr


def test_readme_is_a_few_screens_that_link_every_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 250, "README.md grew into a manual: move it to docs/"
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = re.findall(r"^\s+- (?:[^:\n]+: )?([\w-]+\.md)$", config, re.M)
    assert "getting-started.md" in pages and "reference.md" in pages
    # The home page repeats README.md; the changelog page includes CHANGELOG.md, linked as such.
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)\)", readme)) | {"index.md"}
    assert "](CHANGELOG.md)" in readme
    missing = [page for page in pages if page not in linked and page != "changelog.md"]
    assert missing == [], f"README.md does not link to docs/{', docs/'.join(missing)}"


def _fenced(text, language):
    """The bodies of the ```language blocks of a markdown text."""
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.M | re.S)


def unmarked(body):
    """A block without its `# not run by the tests: REASON` line."""
    return "".join(
        line for line in body.splitlines(keepends=True) if "not run by the tests" not in line
    )


def test_readme_tour_is_the_getting_started_script_and_commands():
    """README's tour is not run by the docs tests because getting-started.md runs the same
    script and commands: the two must not drift apart."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    started = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    # Neither copy runs where it stands (getting-started.md's next block runs its copy): the
    # marker lines aside, the two are the same script.
    tiny = [unmarked(body) for body in _fenced(readme, "python") if body.startswith("# tiny.py")]
    scripts = [unmarked(body) for body in _fenced(started, "python")]
    assert tiny and tiny[0] in scripts, "README's tiny.py differs"
    (tour,) = [body for body in _fenced(readme, "bash") if "docs/getting-started.md runs" in body]
    commands = {line.split("#")[0].strip() for line in tour.splitlines()} - {""}
    run_there = {
        line.split("#")[0].strip()
        for body in _fenced(started, "bash")
        if "not run by the tests" not in body
        for line in body.splitlines()
    }
    assert commands <= run_there, f"not run in getting-started.md: {commands - run_there}"

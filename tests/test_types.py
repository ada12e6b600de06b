"""The type hints devicekit publishes (it ships py.typed), proven from a user's side: mypy
--strict accepts a script that uses the flat API as documented, and rejects each misuse in
another at the line and with the error code it is marked with."""

import os
import re

from mypy import api

from conftest import ROOT

HERE = os.path.join(ROOT, "tests", "typing")
USES = os.path.join(HERE, "uses_the_api.py")
MISUSES = os.path.join(HERE, "misuses_the_api.py")


def run_mypy(tmp_path, *paths):
    """mypy --strict on `paths` as a user's project would run it (devicekit's own modules
    analysed, their messages not shown): {path: [(line, code)]}, and the full output."""
    out, err, _ = api.run(
        [
            "--strict",
            "--follow-imports=silent",
            "--no-error-summary",
            "--config-file=",
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            "--python-version",
            "3.10",
            *paths,
        ]
    )
    found = {}
    for match in re.finditer(r"^(.+?):(\d+): error: .*\[([a-z-]+)\]$", out, re.MULTILINE):
        found.setdefault(os.path.abspath(match[1]), []).append((int(match[2]), match[3]))
    return found, out + err


def test_the_flat_api_used_as_documented_type_checks_and_its_misuses_are_caught(tmp_path):
    found, output = run_mypy(tmp_path, USES, MISUSES)
    assert USES not in found, output
    with open(MISUSES, encoding="utf-8") as handle:
        marked = [
            (number, line.split("# error: ")[1].strip())
            for number, line in enumerate(handle, 1)
            if "# error: " in line
        ]
    assert len(marked) == 9
    assert sorted(found.get(MISUSES, [])) == marked, output

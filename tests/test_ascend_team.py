"""An Ascend team's own pytest suite, run on this CPU machine by the CI job that
docs/ascend-ci.md gives, as the page writes it.

tests/ascend_team is written as such a team writes tests for an NPU host: `import torch_npu`,
tensors on `npu`, torch_npu's fused operators and optimizers, Ascend's apex,
`transfer_to_npu`, torch_npu's profiler. The main suite does not collect it (its files are
ascend_*.py, its pytest.ini its own): it needs the stand-in in the process, which the CI job's
`python -m devicekit simulate -- python -m pytest` gives. One run covers every file.
"""

import ast
import re
import shutil
import subprocess

import pytest
import yaml

from conftest import clean_environ
from support.paths import REPO, TESTS

SUITE = TESTS / "ascend_team"
PAGE = REPO / "docs" / "ascend-ci.md"
MARKER = "<!-- the CI job: tests/test_ascend_team.py runs its steps -->"
TIMEOUT_S = 600  # the whole suite in one process, the extension's first build included


def ci_steps():
    """The `run` steps of the job in the page's yaml block after MARKER, in order."""
    text = PAGE.read_text()
    block = re.search(re.escape(MARKER) + r"\s*```yaml\n(.*?)```", text, re.S)
    assert block, f"{PAGE.name} has no yaml block after {MARKER}"
    [job] = yaml.safe_load(block.group(1))["jobs"].values()
    return [step["run"] for step in job["steps"] if "run" in step]


def is_install(step):
    return "pip install" in step or "apt-get" in step


def test_the_ci_job_installs_torchs_cpu_build_pinned():
    """The job's install step takes torch 2.13.0 from the CPU index (an unpinned torch
    would pull a multi-GB CUDA build) and devicekit; another step runs pytest under simulate."""
    steps = ci_steps()
    installs = "\n".join(step for step in steps if is_install(step))
    assert "torch==2.13.0" in installs and "download.pytorch.org/whl/cpu" in installs, installs
    assert "devicekit" in installs, installs
    runs = [step for step in steps if not is_install(step)]
    assert any("devicekit simulate" in step and "pytest" in step for step in runs), runs


def _test_functions():
    """How many `def test_...` the suite's files hold (parametrized ones count once)."""
    return sum(
        isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
        for path in SUITE.glob("ascend_*.py")
        for node in ast.walk(ast.parse(path.read_text()))
    )


@pytest.mark.slow
def test_an_ascend_teams_suite_passes_on_a_cpu_machine_as_the_ci_job_runs_it(tmp_path):
    """The job's steps, installs aside (this environment has them), run in a copy of the
    team's repository whose tests/ is tests/ascend_team: every test passes, none skipped."""
    shutil.copytree(SUITE, tmp_path / "tests")
    outputs = []
    for step in (step for step in ci_steps() if not is_install(step)):
        result = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", step],
            cwd=tmp_path,
            env=clean_environ(OMP_NUM_THREADS="1"),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        assert result.returncode == 0, f"{step}\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}"
        outputs.append(result.stdout)
    summary = re.search(r"^=*\s*(\d+) passed(.*) in [\d.]+s", outputs[-1], re.M)
    assert summary, outputs[-1][-2000:]
    others = re.sub(r",? \d+ warnings?", "", summary.group(2)).strip(" ,=")
    assert not others, f"not all passed: {summary.group(0)}"
    assert int(summary.group(1)) >= _test_functions() > 0, summary.group(0)

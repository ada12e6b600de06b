"""The suite's own machinery, as CI depends on it: the process budget counts exactly the
Python processes that import torch, the workers' shared runs are grouped so each is made
once, and a wheel that cannot be downloaded stops the run in one line that says how to
fetch it."""

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

import conftest
from support import npu_wheel
from support.process_budget import BUDGET, SESSION_ENV, Counter, over_budget, summary_lines

TIMEOUT_S = 60


def test_the_budget_counts_a_process_that_imports_torch_and_not_one_that_does_not(tmp_path):
    # A module named torch on the children's path stands in for torch: the counter notes the
    # first import of that name, and the real one would cost a second and a half each.
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "torch.py").write_text("")
    counter = Counter(tmp_path / "cache", session="harness-test")
    counter.start()
    try:
        # A venv whose lib64 links to lib reads its .pth files twice: still one count.
        twice = tmp_path / "lib64"
        twice.mkdir()
        (twice / counter.pth.name).write_text(counter.pth.read_text())
        env = {SESSION_ENV: "harness-test", "PYTHONPATH": str(fake), "PATH": "/usr/bin:/bin"}
        for code in (
            "import torch; import torch",
            "import json",
            f"import site; site.addsitedir({str(twice)!r}); import torch",
        ):
            subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=TIMEOUT_S)
    finally:
        counter.stop()
    assert counter.count() == 2, counter.entries()
    assert [command for _pid, _test, command in counter.entries()] == ["-c", "-c"]
    assert not counter.pth.exists() and not counter.hook.exists()


def test_the_summary_names_the_count_the_budget_and_the_tests_that_start_most(tmp_path):
    counter = Counter(tmp_path, session="summary-test")
    rows = [f"{pid}\t1\ttests/test_x.py::test_{pid % 2}\tpython main.py\n" for pid in range(5)]
    counter.log.write_text("".join(rows))
    lines = summary_lines(counter)
    assert lines[0].startswith(
        f"process budget: 5 Python processes imported torch, budget {BUDGET}"
    )
    assert "within budget" in lines[0] and not over_budget(counter)
    assert lines[2].split() == ["3", "tests/test_x.py::test_0"]
    counter.log.write_text(rows[0] * (BUDGET + 1))
    assert "OVER budget" in summary_lines(counter)[0] and over_budget(counter)


class _Item:
    """A collected test as the grouping reads it: its module and {fixture name: scope},
    every fixture defined in one of the suite's test modules."""

    def __init__(self, module, **fixtures):
        self.module = SimpleNamespace(__name__=module)
        ours = SimpleNamespace(__module__="test_defs")
        self._fixtureinfo = SimpleNamespace(
            name2fixturedefs={
                name: [SimpleNamespace(func=ours, scope=scope)] for name, scope in fixtures.items()
            }
        )


def test_tests_that_share_a_run_directly_or_through_another_test_share_a_worker():
    a = _Item("test_a", runs="module")
    b = _Item("test_a", runs="module", matrix="session")
    c = _Item("test_b", matrix="session")
    d = _Item("test_b", runs="module")  # test_b's own "runs": another fixture than test_a's
    alone = _Item("test_c", tmp_path="function")
    groups = conftest._groups([a, b, c, d, alone])
    assert groups[a] == groups[b] == groups[c] == "test_a"
    assert groups[d] == "test_b"
    assert alone not in groups


@pytest.fixture(scope="module")
def shared_run():
    """A run of module scope, as the suite's launcher matrices are: it groups its readers."""
    return "made once"


def test_a_test_that_shares_a_run_is_sent_as_its_group(shared_run, request):
    """xdist sends a group to one worker only when the group is in the test's id: a pytest
    that drops it (pytest-xdist#1386, pytest 9.2) spreads a shared run's readers over both
    workers, each making the run again, and the process count doubles."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("no xdist workers: every test runs in this one process")
    assert request.config.getvalue("loadgroup")
    assert request.node.nodeid.endswith("@test_harness"), request.node.nodeid


def test_a_wheel_that_cannot_be_downloaded_is_one_line_saying_how_to_fetch_it(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(npu_wheel, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(npu_wheel, "_pip_download", lambda tag, dest, index_url: "no route")
    line = npu_wheel.prefetch()
    tag = npu_wheel.wanted_tags()[0]
    assert "\n" not in line
    assert line.startswith(f"cannot download {npu_wheel.wheel_name(tag)}")
    assert f"pip download torch-npu=={npu_wheel.NPU_VERSION} --no-deps" in line
    assert f"--dest {tmp_path}" in line
    assert list(tmp_path.iterdir()) == []  # no half-downloaded file left


def test_a_downloaded_wheel_whose_hash_is_not_the_pin_is_not_kept(tmp_path, monkeypatch):
    def download(tag, dest, index_url):
        (dest / npu_wheel.wheel_name(tag)).write_bytes(b"not the wheel")
        return ""

    monkeypatch.setattr(npu_wheel, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(npu_wheel, "_pip_download", download)
    tag = npu_wheel.wanted_tags()[0]
    problem = npu_wheel.download(tag)
    assert f"sha256 mismatch: expected {npu_wheel.WHEEL_SHA256[tag]}" in problem
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("ci", ["true", None])
def test_without_a_wheel_the_tests_that_read_it_fail_in_ci_and_skip_elsewhere(
    tmp_path, monkeypatch, ci
):
    monkeypatch.setattr(npu_wheel, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(npu_wheel, "_pip_download", lambda tag, dest, index_url: "no route")
    if ci:
        monkeypatch.setenv("CI", ci)
    else:
        monkeypatch.delenv("CI", raising=False)
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected, match="cannot download torch_npu-"):
        npu_wheel.fetch_wheel(npu_wheel.FALLBACK_TAG)

"""The package people install: devicekit alone in the wheel (with its data files, py.typed
and the licence), every submodule importable as itself, a version that answers, and
README's library example running from outside the checkout. (.ci/check-wheel also
installs the wheel into a fresh environment.)"""

import importlib
import pkgutil
import re
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import pytest

import devicekit
from conftest import ROOT, clean_environ
from package_checks import DATA_FILES, library_example, wheel_problems


def test_every_submodule_imports_as_itself():
    """`import devicekit.x as m` gives the module x.py, not a function of the same name."""
    shadowed = []
    for info in pkgutil.walk_packages(devicekit.__path__, "devicekit."):
        # __main__ runs the command line; forkserver_preload ties the importer's life to its
        # parent (it is for the forkserver of devicekit.worker_context() alone).
        if info.name.endswith(("__main__", "forkserver_preload")):
            continue
        namespace: dict = {}
        exec(f"import {info.name} as module", namespace)
        if not isinstance(namespace["module"], types.ModuleType):
            shadowed.append(info.name)
        importlib.import_module(info.name)
    assert shadowed == []


def test_version_answers_and_sharding_stays_unimported():
    """`python -m devicekit --version` answers, and the process, which imported devicekit
    and its command line, never imported FSDP, DTensor or distributed checkpoints: shard()
    and a sharded checkpoint import them, and they cost every process that imports devicekit
    about 0.9 s here. (-X importtime lists every module the process imports, on stderr.)"""
    heavy = ("torch.distributed.tensor", "torch.distributed.fsdp", "torch.distributed.checkpoint")
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "devicekit", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0 and result.stdout == f"devicekit {devicekit.__version__}\n"
    imported = re.findall(r"^import time:.*\|\s*(\S+)$", result.stderr, re.M)
    assert "devicekit" in imported, result.stderr
    assert [name for name in imported if name.startswith(heavy)] == []


def test_the_console_script_answers_its_version():
    command = [str(Path(sys.executable).parent / "devicekit"), "--version"]
    if not Path(command[0]).exists():
        pytest.skip("the console script is installed by pip install (-e) .")
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout == f"devicekit {devicekit.__version__}\n"


def test_the_changelog_names_this_version():
    changelog = (Path(ROOT) / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(devicekit.__version__)} ", changelog, re.M)


@pytest.mark.slow
def test_the_wheel_holds_devicekit_alone(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), ROOT],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = tmp_path.glob("devicekit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert wheel_problems(names) == []
    assert not any(name.startswith(("models/", "trainer/", "tests/")) for name in names)
    assert set(DATA_FILES) <= set(names)


def test_the_checks_catch_a_wheel_that_is_wrong():
    good = ["devicekit/__init__.py", *DATA_FILES, "devicekit-1.dist-info/licenses/LICENSE"]
    assert wheel_problems(good) == []
    assert wheel_problems(good + ["models/resnet.py"]) == ["holds more than devicekit: models"]
    assert wheel_problems(good[:1] + good[2:]) == ["devicekit/py.typed is missing"]


@pytest.mark.slow
def test_the_readme_library_example_runs_outside_the_checkout(tmp_path):
    script = tmp_path / "tiny.py"
    script.write_text(library_example((Path(ROOT) / "README.md").read_text()))
    environ = clean_environ(DEVICEKIT_DEVICE="cpu", OMP_NUM_THREADS="1")
    environ.pop("PYTHONPATH")  # the installed devicekit, not the checkout's folder
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(re.findall(r"rank (\d) of 2 on cpu", result.stdout)) == ["0", "1"]

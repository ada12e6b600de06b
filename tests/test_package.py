"""The package people install: devicekit alone in the wheel (with its data files, py.typed
and the licence), every submodule importable as itself, a version that answers, and the
wheel installed without -e into a fresh environment running its console script, doctor and
README's library example from outside the checkout."""

import importlib
import pkgutil
import re
import subprocess
import sys
import types
import venv
import zipfile
from pathlib import Path

import pytest
import torch

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


def test_the_changelog_names_this_version():
    changelog = (Path(ROOT) / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(devicekit.__version__)} ", changelog, re.M)


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory):
    """The wheel of this checkout, as `pip wheel` builds it: made once for the module."""
    folder = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(folder), ROOT],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = folder.glob("devicekit-*.whl")
    return wheel


@pytest.mark.slow
def test_the_wheel_holds_devicekit_alone(built_wheel):
    names = zipfile.ZipFile(built_wheel).namelist()
    assert wheel_problems(names) == []
    assert not any(name.startswith(("models/", "trainer/", "tests/")) for name in names)
    assert set(DATA_FILES) <= set(names)


def test_the_checks_catch_a_wheel_that_is_wrong():
    good = ["devicekit/__init__.py", *DATA_FILES, "devicekit-1.dist-info/licenses/LICENSE"]
    assert wheel_problems(good) == []
    assert wheel_problems(good + ["models/resnet.py"]) == ["holds more than devicekit: models"]
    assert wheel_problems(good[:1] + good[2:]) == ["devicekit/py.typed is missing"]


def _run(argv, cwd, env):
    result = subprocess.run(
        [str(arg) for arg in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"{argv}: exit {result.returncode}\n{result.stderr}"
    return result.stdout


@pytest.mark.slow
def test_the_installed_wheel_runs_outside_the_checkout(built_wheel, tmp_path):
    """The wheel installed without -e into a fresh environment, then, from a folder outside
    the checkout: the console script's version, doctor, and README's library example on two
    CPU ranks. torch and the other requirements are read from the folder this Python has
    them in (a path entry of the new environment): installing torch again would prove
    nothing about the wheel, and pip still checks that each requirement is met."""
    venv.create(tmp_path / "venv", with_pip=True)
    bin_dir = tmp_path / "venv" / "bin"
    outside = tmp_path / "outside"
    outside.mkdir()
    env = clean_environ(DEVICEKIT_DEVICE="cpu", OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH")  # the installed devicekit, not the checkout's folder
    query = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = _run([bin_dir / "python", "-c", query], outside, env).strip()
    Path(site, "requirements_here.pth").write_text(f"{Path(torch.__file__).parents[1]}\n")
    # ensurepip's setuptools would shadow the newer one torch requires, and the tests'
    # workers have no route to an index that could replace it
    _run(
        [bin_dir / "python", "-m", "pip", "uninstall", "--quiet", "-y", "setuptools"], outside, env
    )
    _run(
        [bin_dir / "python", "-m", "pip", "install", "--quiet", "--no-index", built_wheel],
        outside,
        env,
    )
    version = _run([bin_dir / "devicekit", "--version"], outside, env)
    assert version == f"devicekit {devicekit.__version__}\n"
    where = _run(
        [bin_dir / "python", "-c", "import devicekit; print(devicekit.__file__)"], outside, env
    )
    assert where.startswith(str(bin_dir.parent)), where
    doctor = _run([bin_dir / "python", "-m", "devicekit", "doctor"], outside, env)
    assert doctor.startswith(f"devicekit    {devicekit.__version__}\n"), doctor
    (outside / "tiny.py").write_text(library_example((Path(ROOT) / "README.md").read_text()))
    out = _run([bin_dir / "python", "tiny.py"], outside, env)
    assert sorted(re.findall(r"rank (\d) of 2 on cpu", out)) == ["0", "1"], out

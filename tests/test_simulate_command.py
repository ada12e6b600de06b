"""`python -m devicekit simulate -- COMMAND`: the npu stand-in in every Python process a
command starts, whether or not its code imports devicekit; its command line checked first.
"""

import subprocess
import sys

import pytest

from conftest import clean_environ
from devicekit import simulate
from devicekit.errors import UsageError
from devicekit.simulate import command
from support.paths import REPO, TESTS

UNAWARE = TESTS / "npu_standin" / "ascend_unaware.py"
TIMEOUT_S = 300  # includes the first build of the stand-in's extension


@pytest.mark.slow
def test_torchrun_and_its_workers_get_the_stand_in_without_importing_devicekit():
    """torchrun's two ranks and each one's DataLoader worker: `import torch_npu`, tensors on
    npu:0 and npu:1, an hccl all_reduce, the one line saying what is not simulated. A
    torch_npu name the stand-in lacks: hasattr False, and using it says so in one line."""
    result = subprocess.run(
        [sys.executable, "-m", "devicekit", "simulate", "--devices", "2", "--",
         "torchrun", "--standalone", "--nproc-per-node", "2", str(UNAWARE)],
        cwd=REPO,
        env=clean_environ(OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (
        "refused: torch_npu.npu_grouped_matmul is not provided by the npu stand-in: it needs "
        "a real Ascend NPU with torch_npu 2.13.0\n"
    ) in result.stdout
    assert "torch_npu 2.13.0+devicekit.standin, npu_grouped_matmul: False" in result.stdout
    assert sorted(line for line in result.stdout.splitlines() if line.startswith("rank")) == [
        "rank 0 on npu:0: 56.0",  # 28 on each rank, summed
        "rank 1 on npu:1: 56.0",
    ], result.stdout
    assert result.stderr.startswith(
        "devicekit simulate: 2 simulated NPU(s), npu:0 to npu:1, in every Python process of "
        "this command; NPU numerics and speed are not simulated\n"
    ), result.stderr


@pytest.mark.parametrize(
    "argv, says",
    [
        ([], "no command to run: write it after --"),
        (["--"], "no command to run: write it after --"),
        (["--devices", "0", "--", "python"], "--devices '0': give a whole number"),
        (["--devices", "two", "--", "python"], "--devices 'two': give a whole number"),
        (["--devices", "²", "--", "python"], "--devices '²': give a whole number"),
        (["--memory", "lots", "--", "python"], "--memory 'lots' is not a memory size"),
        (["--", "no-such-command-here"], "'no-such-command-here': command not found"),
    ],
)
def test_a_bad_command_line_is_one_line_before_anything_runs(argv, says):
    with pytest.raises(UsageError, match="^" + says.replace("(", r"\(").replace("?", r"\?")):
        command.main(argv)


def test_an_installed_torch_npu_is_never_mixed_with_the_stand_in(monkeypatch, tmp_path):
    """A real torch_npu found on the path is refused; the stand-in's own is not real."""
    real = tmp_path / "torch_npu"
    real.mkdir()
    (real / "__init__.py").write_text("raise ImportError('never imported here')\n")
    assert not simulate.real_torch_npu_installed()
    monkeypatch.syspath_prepend(str(simulate.SITE))
    assert not simulate.real_torch_npu_installed(), "the stand-in's torch_npu"
    monkeypatch.syspath_prepend(str(tmp_path))
    assert simulate.real_torch_npu_installed()
    with pytest.raises(UsageError, match="torch_npu is installed in this environment"):
        command.main(["--", "python"])

"""`python -m devicekit simulate -- COMMAND`: its command line checked first. What the
command's processes get (the stand-in under torchrun, mp.spawn, a RANK_ID loop, DataLoader
workers; the one line first; HCCL_* noted) is tests/test_ascend_ddp.py's.
"""

import pytest

from devicekit import simulate
from devicekit.errors import UsageError
from devicekit.simulate import command


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

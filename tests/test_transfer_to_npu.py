"""A real CUDA training script with the two transfer_to_npu lines added runs on the npu
stand-in, as one process and under torchrun: `python -m devicekit simulate -- ...`.

tests/ascend_team/ascend_transfer_to_npu.py covers the redirected names one by one (in the
Ascend team's suite, run by tests/test_ascend_team.py).
"""

import re
import sys

import pytest

from conftest import clean_environ
from support.paths import TESTS
from support.processes import Processes, describe

SCRIPT = TESTS / "npu_standin" / "cuda_with_transfer.py"
TIMEOUT_S = 300  # includes the first build of the stand-in's extension
RANK_LINE = re.compile(
    r"rank (\d): cuda available True, parameters on \['(npu:\d)'\], backend (\w+), "
    r"autocast torch\.float16, checkpoint on \['(npu:\d)'\], checksum ([-+.e0-9]+)"
)  # the ranks share stdout: a line's newline may come after the other rank's line
NOTE = "ImportWarning: torch_npu.contrib.transfer_to_npu: torch.cuda.* and torch.cuda.amp.*"


def simulate(*command):
    """`python -m devicekit simulate --devices 2 -- COMMAND`."""
    return [sys.executable, "-m", "devicekit", "simulate", "--devices", "2", "--", *command]


def ranks(run):
    """{rank: (device of every parameter, backend, checkpoint's device, checksum)} of a run
    that succeeded."""
    assert run.returncode == 0, run.stderr
    found = {int(m[1]): m.groups()[1:] for m in RANK_LINE.finditer(run.stdout)}
    assert found, run.stdout
    return found


@pytest.mark.slow
def test_a_cuda_ddp_script_runs_on_npu_alone_and_under_torchrun(tmp_path):
    """Every parameter on npu (npu:1 for rank 1, as `torch.cuda.set_device(local_rank)`
    asks), nccl answered by hccl, fp16 autocast from torch.cuda.amp, the checkpoint loaded
    with map_location="cuda:N" on npu:N, both ranks ending with the same weights; the note
    saying what transfer_to_npu redirects is printed once, by rank 0. Both runs at once."""
    env = clean_environ(OMP_NUM_THREADS="1")
    with Processes(tmp_path / "processes") as procs:
        started = [
            procs.start("alone", simulate(
                "python", str(SCRIPT), "--gpu", "0", "--checkpoint", str(tmp_path / "alone.pt"),
            ), env),
            procs.start("torchrun", simulate(
                "torchrun", "--standalone", "--nproc-per-node", "2", str(SCRIPT),
                "--dist-url", "env://", "--checkpoint", str(tmp_path / "ddp.pt"),
            ), env),
        ]  # fmt: skip
        alone, ddp = procs.finish_all(started, TIMEOUT_S)

    [(rank, (devices, backend, restored, _))] = ranks(alone).items()
    assert (rank, devices, backend, restored) == (0, "npu:0", "none", "npu:0"), alone.stdout
    assert alone.stderr.count(NOTE) == 1, alone.stderr
    found = ranks(ddp)
    assert found.keys() == {0, 1}, describe([ddp])
    assert found[0][:3] == ("npu:0", "hccl", "npu:0")
    assert found[1][:3] == ("npu:1", "hccl", "npu:1")
    assert found[0][3] == found[1][3], f"the ranks' weights differ: {ddp.stdout}"
    assert ddp.stderr.count(NOTE) == 1, ddp.stderr

"""Running out of memory is a user's problem to fix, not a crash: main.py, the ranks of
devicekit.launch() and any script that imports devicekit end with one line that gives the
sizes torch reported and what to try, and exit code 2 (the launchers then stop the other
ranks as for any rank that exits 2)."""

import sys

import pytest
import torch

from devicekit.errors import exit_on_usage_error, report_usage_errors

ADVICE = (
    "; use a smaller batch, or split the model, its gradients and optimizer state across "
    "the ranks with devicekit.shard(model) (activation_checkpointing=True saves more)"
)
CUDA_TEXT = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB "
    "of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.07 GiB "
    "memory in use. Of the allocated memory 76.50 GiB is allocated by PyTorch."
)


def ended_with(capsys, call):
    """(exit code, stderr lines) of `call`, which must exit."""
    with pytest.raises(SystemExit) as exited:
        call()
    return exited.value.code, capsys.readouterr().err.splitlines()


def test_the_cpu_allocator_running_out_is_one_line(capsys):
    @exit_on_usage_error
    def train():
        torch.empty(2**62, dtype=torch.uint8)  # 4 EiB: a real allocation failure

    code, lines = ended_with(capsys, train)
    assert code == 2
    assert lines == [
        "error: out of memory: the CPU can't allocate memory: you tried to allocate "
        f"4611686018427387904 bytes{ADVICE}"
    ]


def test_a_device_running_out_gives_torchs_sizes(capsys):
    @exit_on_usage_error
    def train():
        raise torch.OutOfMemoryError(CUDA_TEXT)

    code, lines = ended_with(capsys, train)
    assert code == 2
    assert lines == [
        "error: out of memory: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        f"total capacity of 79.10 GiB of which 1.02 GiB is free{ADVICE}"
    ]


def test_a_script_that_lets_it_escape_ends_the_same_way(capsys, monkeypatch):
    """devicekit's excepthook, installed by `import devicekit` (what a plain script or a
    torchrun rank runs into)."""
    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)
    report_usage_errors()
    error = torch.OutOfMemoryError("NPU out of memory. Tried to allocate 512.00 MiB.")
    code, lines = ended_with(capsys, lambda: sys.excepthook(type(error), error, None))
    assert code == 2
    assert lines == [
        f"error: out of memory: NPU out of memory. Tried to allocate 512.00 MiB{ADVICE}"
    ]


def test_other_runtime_errors_keep_their_traceback():
    @exit_on_usage_error
    def train():
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        train()

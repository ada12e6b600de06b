"""DataLoader workers: forked where that is safe, from a forkserver where this interpreter
can deadlock a forked child (CPython gh-112275)."""

import os
import sys
from types import SimpleNamespace

import pytest
import torch

from devicekit import doctor, workers
from trainer.loaders import build_loaders


@pytest.mark.parametrize(
    ("version", "implementation", "deadlocks"),
    [
        ((3, 8, 19), "CPython", True),
        ((3, 8, 20), "CPython", False),
        ((3, 9, 19), "CPython", True),
        ((3, 9, 20), "CPython", False),
        ((3, 10, 14), "CPython", True),
        ((3, 10, 15), "CPython", False),
        ((3, 11, 7), "CPython", True),
        ((3, 11, 9), "CPython", True),
        ((3, 11, 10), "CPython", False),
        ((3, 12, 0), "CPython", False),
        ((3, 13, 1), "CPython", False),
        ((3, 10, 14), "PyPy", False),
    ],
)
def test_fork_can_deadlock_on_the_releases_before_the_fix(version, implementation, deadlocks):
    assert workers.fork_can_deadlock(version, implementation) is deadlocks


class ParentPids(torch.utils.data.Dataset):
    """Each sample is the pid of the process that started the worker loading it."""

    def __len__(self):
        return 4

    def __getitem__(self, key):
        return os.getppid()


def _worker_parents(monkeypatch, deadlocks):
    monkeypatch.setattr(workers, "fork_can_deadlock", lambda: deadlocks)
    rank = SimpleNamespace(world_size=1, rank=0)
    train, val = build_loaders(ParentPids(), ParentPids(), 2, 1, rank, seed=0)
    return {int(pid) for batch in [*train, *val] for pid in batch}


def test_loader_workers_start_from_a_forkserver_where_fork_can_deadlock(monkeypatch):
    (parent,) = _worker_parents(monkeypatch, deadlocks=True)
    assert parent != os.getpid()  # the forkserver


@pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux")
def test_loader_workers_are_forked_from_the_rank_where_fork_is_safe(monkeypatch):
    assert _worker_parents(monkeypatch, deadlocks=False) == {os.getpid()}


def test_doctor_warns_where_forked_workers_can_deadlock(monkeypatch):
    monkeypatch.setattr(doctor, "fork_can_deadlock", lambda: True)
    info = doctor.gather("cpu")
    (warning,) = [text for text in info["warnings"] if "gh-112275" in text]
    assert warning.startswith(f"Python {info['python']} can deadlock a forked child")
    assert "upgrade to Python 3.11.10, 3.10.15 or later" in warning
    assert f"WARNING      {warning}" in doctor.format_report(info)
    monkeypatch.setattr(doctor, "fork_can_deadlock", lambda: False)
    assert not [text for text in doctor.gather("cpu")["warnings"] if "gh-112275" in text]

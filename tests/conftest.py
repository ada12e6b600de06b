"""Shared test helpers: a clean launcher environment and the repository root on the path."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

LAUNCHER_VARS_PREFIXES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_",
                          "GROUP_", "ROLE_", "NODE_RANK", "TORCHELASTIC", "SLURM", "OMPI_",
                          "RANK_ID", "RANK_SIZE", "DEVICEKIT_", "CUDA_VISIBLE_DEVICES",
                          "ASCEND_RT_VISIBLE_DEVICES")


def clean_environ(**extra):
    """os.environ without any launcher or device-selection variable, plus `extra`."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(LAUNCHER_VARS_PREFIXES)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    env.update({key: str(value) for key, value in extra.items()})
    return env


@pytest.fixture(autouse=True)
def _no_launcher_environment(monkeypatch):
    """Tests start from an environment no launcher has touched."""
    for key in list(os.environ):
        if key.startswith(LAUNCHER_VARS_PREFIXES):
            monkeypatch.delenv(key)


@pytest.fixture(autouse=True)
def _fresh_devicekit_process_state():
    """Each test starts as a new process would: no kind, no context, no process group."""
    from devicekit import distributed, runtime

    runtime.adopt(None, None)
    yield
    distributed.destroy_process_group()
    runtime.adopt(None, None)

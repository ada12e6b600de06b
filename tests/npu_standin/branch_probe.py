"""Run a script (argv[1:]) as __main__ and, when it ends, print which autocasts it entered
switched on and how often it synchronized the device: one line per process,
`PROBE rank=R autocast=[npu:torch.bfloat16] synchronize=N`. Tests use it to see that a
ported script takes the accelerator's branch on the npu stand-in."""

import os
import runpy
import sys

import torch

import devicekit  # noqa: F401  (turns the stand-in on, so torch.npu exists)

entered = set()
synchronized = [0]
enter, synchronize = torch.autocast.__enter__, torch.npu.synchronize


def probing_enter(self):
    if self._enabled:
        entered.add(f"{self.device}:{self.fast_dtype}")
    return enter(self)


def probing_synchronize(*args, **kwargs):
    synchronized[0] += 1
    return synchronize(*args, **kwargs)


torch.autocast.__enter__ = probing_enter
torch.npu.synchronize = probing_synchronize
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:  # when the script ends (not at exit: support/run_scripts.py runs several in one process)
    print(
        f"PROBE rank={os.environ.get('RANK', '0')} "
        f"autocast={sorted(entered)} synchronize={synchronized[0]}",
        flush=True,
    )

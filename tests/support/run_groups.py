"""Groups of runs for the modules that start all their runs at once and test them afterwards
(test_slurm.py, test_mpi_deepspeed.py): one Tracked per part of the shared run.

    with contextlib.ExitStack() as stack:
        train = Group(stack, root / "train")
        train.launch("torchrun_main", "torchrun", MAIN, args)
        poll_until(train.done, timeout, "every run ending with all its processes")
"""

import time

from support.launchers import commands
from support.tracked import Tracked


class Group:
    """The runs of one part of a shared run, found by their own marker (a Tracked of its
    own in `folder`, closed with `stack`): when each started and exited, the Slurm jobs
    submitted for it ({name: job id}), and when the last of its processes was gone
    (time.time())."""

    def __init__(self, stack, folder):
        self.folder = folder
        self.tracked = stack.enter_context(Tracked(folder))
        self.jobs = {}
        self.started, self.exited, self.gone = {}, {}, None

    def start(self, name, argv, env):
        """Start run `name` (Tracked.start), noting when; returns its Popen."""
        self.started[name] = time.time()
        return self.tracked.start(name, argv, env)

    def launch(self, name, launcher, program, args, fault=None, **extra):
        """`program ARGS` with 2 ranks under `launcher` (support.launchers), as `name`."""
        (command,) = commands(launcher, program, args, 2, self.folder, name=name)
        env = self.tracked.env(fault, **command.env)
        self.start(name, command.argv, dict(env, **{k: str(v) for k, v in extra.items()}))

    def done(self):
        """Whether every run exited and no process of the group is left (noting when)."""
        for name in self.started:
            if name not in self.exited and self.tracked.proc(name).poll() is not None:
                self.exited[name] = time.time()
        if self.gone is None and len(self.exited) == len(self.started):
            if not self.tracked.alive():
                self.gone = time.time()
        return self.gone is not None

    def seconds(self, name):
        """From the start of run `name` to its launcher's exit."""
        return self.exited[name] - self.started[name]

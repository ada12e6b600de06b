"""torchrun's 2-rank runs of main.py (TINY) and of the flat-API example, the references
that test_slurm.py and test_mpi_deepspeed.py hold their launchers' runs to: made once a
session by the session fixture `torchrun_references` (tests/conftest.py), so conftest's
grouping runs every test that reads them on one worker. The runs start when the first of
those modules asks for them, beside its own runs:

    main, example = torchrun_references.finished()   # each Finished, waited for once
    reference = load_checkpoint(torchrun_references.main_dir)
"""

from support.launchers import MAIN, script
from support.paths import REPO
from support.run_groups import Group
from support.runs import TINY

EXAMPLE = REPO / "examples" / "launch_local_rank.py"
EXAMPLE_ARGS = ["--steps", "12", "--batch-size", "8"]
RUN_TIMEOUT_S = 600  # beside a module's own runs, on a busy worker


class References:
    """The two torchrun runs, started: main.py's output folder, the example's checkpoint
    path, and their results once ended."""

    def __init__(self, stack, folder):
        self.group = Group(stack, folder)
        self.main_dir = folder / "main"
        self.example_out = folder / "example.pt"
        self.group.launch("main", "torchrun", MAIN, [*TINY, "--output-dir", self.main_dir])
        self.group.launch(
            "example", "torchrun", script(EXAMPLE), [*EXAMPLE_ARGS, "--out", self.example_out]
        )
        self._finished = None

    def finished(self):
        """(main.py's Finished, the example's Finished), waited for at most RUN_TIMEOUT_S."""
        if self._finished is None:
            tracked = self.group.tracked
            self._finished = tuple(
                tracked.wait(name, RUN_TIMEOUT_S)[0] for name in ("main", "example")
            )
        return self._finished

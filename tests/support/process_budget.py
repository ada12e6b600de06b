"""The suite's process budget: every Python process a test run starts that imports torch is
counted, and the run fails when the count passes BUDGET.

Starting Python and importing torch (then torch._dynamo) is most of the suite's CPU, so the
number of such processes is what keeps the suite inside its time. The count covers every
process of this interpreter, whoever starts it: the xdist workers, torchrun's and
launch()'s ranks, DataLoader workers, `devicekit simulate` commands, the ranks Slurm and MPI
start. A `.pth` file in site-packages (read by every interpreter at start) installs a hook
for the length of the run; the hook writes one line to LOG_NAME in .pytest_cache when the
process first imports torch: its pid, the test that was running (PYTEST_CURRENT_TEST, which
children inherit) and its command line.

A new test that needs more processes shares a run that another test makes, or replaces one:
docs/development.md says how to see which tests start the most.
"""

import collections
import os
import site
from pathlib import Path

# At most half of the suite's count on the day the budget came (2026-12-07, 1,673 tests):
# CI's fresh-clone run of 1f17977 started 817 such processes (it printed 1,634: its venv
# read site-packages twice, so the hook ran twice, and pytest 9.2 had spread every shared
# run over both workers, each making it); 704 where pytest kept the groups. Kept: a test
# that needs more processes shares a run or replaces one.
BUDGET = 400

# Named for the session's process, so that a second session (a developer's, beside a long
# run) neither clears nor removes the first one's. Each session counts its own processes:
# those with SESSION_ENV set to its pid, or descended from it.
SESSION_ENV = "PYTEST_DEVICEKIT_PROCESS_SESSION"
PTH_NAME = "devicekit_test_process_count_{pid}.pth"
LOG_NAME = "devicekit-processes-{pid}.tsv"

# Run by every interpreter that reads the .pth file (compiled from this text, LOG filled in).
# A finder first in sys.meta_path that is asked for every import and answers none: it only
# notes the first import of torch. It never removes itself: importlib iterates sys.meta_path
# while asking, and a removal would skip the next finder.
_HOOK = r"""
import os, sys


def _ours():
    # This session's: its variable inherited, or the session's process among the ancestors
    # (a command run with an environment of its own). Another session's hook skips it.
    if os.environ.get(SESSION_ENV) == SESSION:
        return True
    pid = os.getpid()
    for _ in range(64):
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                text = handle.read().decode(errors="replace")
        except OSError:
            return False
        pid = int(text[text.rindex(")") + 2 :].split()[1])
        if pid <= 1:
            return False
        if str(pid) == SESSION:
            return True
    return False


class _CountTorchImport:
    seen = False
    session = SESSION

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "torch" and not cls.seen:
            cls.seen = True
            if not _ours():
                return None
            test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
            command = " ".join(sys.argv)[:300].replace("\t", " ").replace("\n", " ")
            line = f"{os.getpid()}\t{os.getppid()}\t{test or '-'}\t{command}\n"
            try:
                fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError:
                return None
            try:
                os.write(fd, line.encode("utf-8", "replace"))
            finally:
                os.close(fd)
        return None


# A site folder that is read twice (a venv's lib64 linked to lib) runs this twice.
if not any(getattr(finder, "session", None) == SESSION for finder in sys.meta_path):
    sys.meta_path.insert(0, _CountTorchImport)
"""


def _site_packages():
    """The site-packages folder that this interpreter (and its children) read .pth files
    from: the one holding pytest."""
    import pytest

    here = Path(pytest.__file__).resolve().parents[1]
    candidates = [Path(path) for path in site.getsitepackages()]
    return here if here in candidates else candidates[0]


class Counter:
    """The hook installed for one run (start), the count read back (count, by_test), and
    the hook removed (stop)."""

    def __init__(self, cache_dir, session=None):
        cache_dir.mkdir(parents=True, exist_ok=True)
        self.session = session or str(os.getpid())
        self.log = cache_dir / LOG_NAME.format(pid=self.session)
        self.hook = cache_dir / f"devicekit_process_hook_{self.session}.py"
        self.pth = _site_packages() / PTH_NAME.format(pid=self.session)

    def start(self):
        """Install the hook for every interpreter started from now on, after removing the
        logs of this checkout's earlier sessions that have ended."""
        for old in self.log.parent.glob(LOG_NAME.format(pid="*")):
            pid = old.stem.rsplit("-", 1)[1]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():  # its session ended
                old.unlink(missing_ok=True)
        self.log.write_text("")
        constants = f"LOG = {str(self.log)!r}\nSESSION = {self.session!r}\n"
        self.hook.write_text(f"{constants}SESSION_ENV = {SESSION_ENV!r}\n{_HOOK}")
        # A .pth line that starts with "import" is executed; the hook runs only while its
        # file exists, so a run killed before stop() leaves a .pth that does nothing.
        path = str(self.hook)
        self.pth.write_text(
            f"import os; p = {path!r}; os.path.isfile(p) and "
            f"exec(compile(open(p).read(), p, 'exec'), {{'__name__': '_devicekit_count'}})\n"
        )

    def stop(self):
        """Remove the hook: interpreters started afterwards are not counted. The log stays
        for reading until the next session of this checkout removes it."""
        for path in (self.pth, self.hook):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def entries(self):
        """[(pid, test, command)] of every counted process."""
        rows = []
        for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines():
            pid, _ppid, test, command = (line.split("\t", 3) + ["", "", ""])[:4]
            rows.append((pid, test, command))
        return rows

    def count(self):
        return len(self.entries())

    def by_test(self):
        """Counter {test id (or '-' for none): processes it started}."""
        return collections.Counter(test for _pid, test, _command in self.entries())


def summary_lines(counter, top=10):
    """The lines the run ends with: the count against the budget, then the tests that
    started the most processes."""
    count = counter.count()
    verdict = "within" if count <= BUDGET else "OVER"
    lines = [
        f"process budget: {count} Python processes imported torch, budget {BUDGET} "
        f"({verdict} budget; tests/support/process_budget.py)"
    ]
    lines.append(f"  the {top} tests that started the most (all in {counter.log}):")
    for test, number in counter.by_test().most_common(top):
        lines.append(f"  {number:5d}  {test}")
    return lines


def over_budget(counter):
    return counter.count() > BUDGET

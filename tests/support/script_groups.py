"""Several scripts run one after another in one process per rank (support/run_scripts.py),
that process started by a launcher (support.launchers) to its end: each script's exit code
and output read back as if it had been a run of its own.

    group = run_group(folder, "torchrun", [("first", script, ["--epochs", 3]), ...])
    result = group.ran("first")  # exit 0 and no traceback on every rank, or the test fails
"""

import json
import subprocess
import typing
from pathlib import Path

from support.launchers import child_env, script, start
from support.paths import TESTS
from support.processes import Processes, describe

RUN_SCRIPTS = TESTS / "support" / "run_scripts.py"


class Group(typing.NamedTuple):
    """The scripts of one run of support/run_scripts.py: its folder (where each script's
    files go, under its name) and {script's name: CompletedProcess} ("launcher": the
    process started)."""

    folder: Path
    results: dict

    def result(self, name):
        """Script `name`'s CompletedProcess: its exit code (the highest of its ranks'), every
        rank's stdout, then every rank's stderr; it fails the test if the script never ran
        (an earlier script of its run failed on one of several ranks)."""
        result = self.results[name]
        assert result.returncode is not None, (
            f"{name} never ran: an earlier script of its run failed\n"
            + describe([self.results["launcher"]])
        )
        return result

    def ran(self, name):
        """What script `name` printed, once it ended with exit code 0 and no traceback on
        every rank."""
        result = self.result(name)
        assert result.returncode == 0, describe([result])
        assert "Traceback" not in result.stderr, describe([result])
        return result


def run_group(folder, launcher, entries, timeout, environ=None):
    """Run `entries` one after another in one process per rank (support/run_scripts.py):
    each (name, program, args), program a script or [wrapper, script], or (name, program,
    args, env) with variables of the script's own. That process is started as `launcher`
    starts a script: torchrun with 2 ranks, python alone (each script's own launch or
    spawn decides); to the end (`timeout`, nothing left running) in `environ` (default:
    child_env(), the CPU). Each script gets a folder `folder`/its name."""
    folder = Path(folder)
    plan = []
    for name, program, args, *env in entries:
        (folder / name).mkdir(exist_ok=True)
        programs = program if isinstance(program, list) else [program]
        entry = {"name": name, "argv": [*map(str, programs), *map(str, args)]}
        plan.append(dict(entry, env=env[0]) if env else entry)
    (folder / "plan.json").write_text(json.dumps(plan))
    nproc = None if launcher == "python" else 2
    env = child_env() if environ is None else environ
    program = script(RUN_SCRIPTS, folder / "plan.json", folder)
    with Processes(folder / "processes") as procs:
        started = start(procs, launcher, program, [], nproc, folder, env=env, name=launcher)
        [launched] = procs.finish_all(started, timeout)
    results = {"launcher": launched}
    for entry in plan:
        name = entry["name"]
        codes = [int(path.read_text()) for path in sorted(folder.glob(f"{name}.*.code"))]
        if not codes:
            code = None
        elif len(codes) < (nproc or 1):  # a rank that never ended it
            code = max([*codes, 1])
        else:
            code = max(codes)
        text = {
            stream: "".join(path.read_text() for path in sorted(folder.glob(f"{name}.*.{stream}")))
            for stream in ("stdout", "stderr")
        }
        results[name] = subprocess.CompletedProcess(entry["argv"], code, **text)
    return Group(folder, results)

"""Several commands under one `python -m devicekit simulate`: the simulate command (a Python
process that imports torch before it execs the command) starts a shell that runs them all at
once, each with variables of its own and its output in files of its own, and notes each exit
code. What the simulate command itself says (its first line, its note of ignored variables)
is on that process's stderr, once for all of them.

    with Processes(folder / "processes") as procs:
        simulate = start_under_one_simulate(procs, {"alone": (argv, env)}, folder, base_env)
        (finished,) = procs.finish_all([simulate], TIMEOUT_S)
    run = finished_command(folder, "alone")  # a support.processes.Finished
"""

import shlex
import sys
from pathlib import Path

from support.processes import Finished


def _files(folder, name):
    folder = Path(folder)
    return [folder / f"{name}.{what}" for what in ("stdout", "stderr", "exit")]


def start_under_one_simulate(procs, commands, folder, env, devices=2):
    """Start `python -m devicekit simulate --devices DEVICES -- bash -c SCRIPT` with `procs`
    (a support.processes.Processes) in the environment `env`, SCRIPT running every one of
    `commands` ({name: (argv, extra variables)}) at once and waiting for them all."""
    started, waits = [], []
    for i, (name, (argv, extra)) in enumerate(commands.items()):
        out, err, code = (shlex.quote(str(path)) for path in _files(folder, name))
        variables = [f"{key}={value}" for key, value in extra.items()]
        line = shlex.join(["env", *variables, *map(str, argv)])
        started.append(f"{line} >{out} 2>{err} & pid{i}=$!")
        waits.append(f"wait $pid{i}; echo $? >{code}")
    script = "\n".join([*started, *waits])
    simulate = [sys.executable, "-m", "devicekit", "simulate", "--devices", str(devices), "--"]
    return procs.start("simulate", [*simulate, "bash", "-c", script], env)


def finished_command(folder, name):
    """What command `name` left (its exit code, stdout and stderr), once the shell ended."""
    out, err, code = (path.read_text() if path.is_file() else "" for path in _files(folder, name))
    return Finished(int(code) if code else None, out, err, None)

"""Run several Python scripts one after another in this one process, each as `python SCRIPT
ARGS` runs it: as __main__, with its own sys.argv, its output on this process's stdout and
stderr (file descriptors 1 and 2, so that what torch's C++ prints is kept too).

    python run_scripts.py PLAN.json FOLDER

PLAN.json is a list of {"name": NAME, "argv": [SCRIPT, ARG, ...]}, each with "env":
{VARIABLE: VALUE} where the script needs variables of its own (added to os.environ while it
runs; what /proc says this process started with stays the run's). Started by a launcher,
every rank runs the whole plan: each script meets the other ranks' copy of it, as a run of
its own would. What script NAME printed goes to FOLDER/NAME.RANK.stdout and .stderr (RANK:
$RANK, 0 without a launcher), and its exit status to FOLDER/NAME.RANK.code once it ended:
0, or 1 for an uncaught exception (its traceback on its stderr), or its sys.exit code.
os.environ and sys.path are put back after each script, and devicekit starts each with no
kind or context, and torch.compile with no compiled code, as in a new process. In a run of
several ranks ($WORLD_SIZE over 1), the first script that fails ends the process with its
status: the launcher then stops the other ranks, and the later scripts, which have no .code
file, did not run (the ranks would no longer meet in the same script). A single process
goes on to the next script.

One process for several scripts saves each script's `import torch` (and torch._dynamo),
most of a short run's time. Tests use it where the claim is about a script, not about its
process starting afresh.
"""

import gc
import json
import os
import runpy
import sys
import traceback


def fresh_group_names(index):
    """Make the process groups of the `index`th script named apart from the earlier
    scripts' groups. A launcher's store (torchrun's) is one for the whole run, and torch
    names a default group by a count it puts back to 0 when the group is destroyed: the
    next script's gloo would read the addresses an earlier script's ranks left in the
    store under the same name, and connect to ports that are gone."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is not None:
        c10d._world.group_count = 1000 * index


def run_one(name, argv, env, folder, rank):
    """Run `argv` as `python *argv` would, with `env` added to os.environ, its output in
    FOLDER/NAME.RANK.*: its exit status."""
    paths = {
        fd: os.path.join(folder, f"{name}.{rank}.{stream}")
        for fd, stream in ((1, "stdout"), (2, "stderr"))
    }
    saved = {fd: os.dup(fd) for fd in paths}
    environ, old_argv, old_path = dict(os.environ), sys.argv, list(sys.path)
    if "devicekit" in sys.modules:  # devicekit starts with no kind or context, as afresh
        sys.modules["devicekit"].runtime.adopt(None, None)
    gc.collect()  # what the scripts before left goes now, at the same point on every rank
    if "torch._dynamo" in sys.modules:  # and torch.compile with none of its compiled code
        sys.modules["torch._dynamo"].reset()
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, path in paths.items():
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    try:
        os.environ.update(env)
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))  # as `python SCRIPT` sets it
        runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:  # sys.exit("message"): the message on stderr, status 1
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:  # a script's failure is what this reports
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        sys.argv, sys.path[:] = old_argv, old_path
        os.environ.clear()
        os.environ.update(environ)
    with open(os.path.join(folder, f"{name}.{rank}.code"), "w", encoding="utf-8") as handle:
        handle.write(f"{code}\n")
    return code


def main():
    plan_path, folder = sys.argv[1:3]
    with open(plan_path, encoding="utf-8") as handle:
        plan = json.load(handle)
    rank = os.environ.get("RANK", "0")
    for index, entry in enumerate(plan):
        fresh_group_names(index)
        code = run_one(entry["name"], entry["argv"], entry.get("env", {}), folder, rank)
        if code and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            sys.exit(code)


if __name__ == "__main__":
    main()

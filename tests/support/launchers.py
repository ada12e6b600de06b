"""The command lines (argv and environment) that start a program with N ranks, one builder for
every launcher the tests use.

    with Processes(tmp_path / "processes") as procs:
        started = start(procs, "torchrun", MAIN, args, 2, tmp_path)
        results = procs.finish_all(started, timeout)
    text = output_text(results, tmp_path, "torchrun")  # run_8p.sh's rank logs included

`commands()` gives the same command lines without starting anything (for a harness of its
own); `start()` starts them under tests/support/processes.py. The launchers:

    torchrun      python -m torch.distributed.run --standalone [LAUNCHER ARGS]
                      --nproc-per-node N PROGRAM ARGS
    launch        python -m torch.distributed.launch --nproc_per_node N --master_addr 127.0.0.1
                      --master_port FREE PROGRAM ARGS   (it appends --local-rank=R per rank)
    spawn         the program's own way of starting N ranks: main.py
                      --multiprocessing-distributed --nproc-per-node N ARGS, or
                      python -m devicekit ARGS --nproc-per-node N
    python        python PROGRAM ARGS, with DEVICEKIT_NPROC_PER_NODE=N when N is given
                      (devicekit.launch spawns; None: the script or the machine decides)
    single        python PROGRAM ARGS: one process, nothing said about ranks (N must be 1)
    run_8p        bash launch/run_8p.sh ARGS with NPROC_PER_NODE=N, LOG_DIR=<directory>/logs,
                      PYTHON and SCRIPT (left to its main.py default for main.py)
    env           one process per rank, as a shell loop starts them: RANK, WORLD_SIZE,
                      LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    env-legacy-local-rank
                  the same loop with `--local_rank R` on the command line instead of LOCAL_RANK
                      (what torch 1.x's torch.distributed.launch gave its workers)
    nodes         one process per rank, each its own one-rank node (LOCAL_RANK 0,
                      LOCAL_WORLD_SIZE 1, GROUP_RANK R)
    ascend        one process per rank with Ascend's RANK_ID, RANK_SIZE, MASTER_ADDR, MASTER_PORT
    openmpi       mpirun.openmpi -np N --oversubscribe PROGRAM ARGS (Open MPI), with
                      MASTER_PORT=FREE and OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1 (root may run it)
    mpich         mpiexec.mpich -n N PROGRAM ARGS (MPICH's Hydra), with MASTER_PORT=FREE
    deepspeed     deepspeed --num_gpus N --master_port FREE PROGRAM ARGS (DeepSpeed's launcher;
                      on a CPU machine it starts N ranks too, and inserts --local_rank=R
                      before the program's arguments)

The MPI launchers are called by their implementations' own names: plain `mpirun` and
`mpiexec` are whichever the alternatives system chose (Open MPI where both are installed).
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from conftest import clean_environ

PY = sys.executable
RUN_8P = "launch/run_8p.sh"  # relative to the repository, where children start
PER_RANK = ("env", "env-legacy-local-rank", "nodes", "ascend")  # one process per rank
MPI = {"openmpi": "mpirun.openmpi", "mpich": "mpiexec.mpich"}  # launcher: its command

# run_8p.sh's own knobs: none may leak in from the test's own environment (nor a fault
# injection's FAULT_* settings, see tests/fault_injection).
_SCRIPT_VARIABLES = (
    "NPROC_PER_NODE",
    "NNODES",
    "NODE_RANK",
    "LOG_DIR",
    "BIND_CORES",
    "PYTHON",
    "MAX_RESTARTS",
    "SCRIPT",
)


def child_env(**extra):
    """A launcher-free environment for a child: the repository importable, cpu forced, one
    OpenMP thread per process (the ranks share 2 cores), unbuffered output, none of
    run_8p.sh's knobs or fault settings; plus `extra`, where None removes a variable."""
    env = clean_environ(DEVICEKIT_DEVICE="cpu", OMP_NUM_THREADS=1, PYTHONUNBUFFERED=1)
    for name in list(env):
        if name in _SCRIPT_VARIABLES or name.startswith("FAULT_"):
            del env[name]
    for name, value in extra.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = str(value)
    return env


@dataclass(frozen=True)
class Program:
    """What each rank runs: `python *target ARGS`. `spawn(nproc, args)` gives the arguments
    with which the program starts `nproc` ranks itself (launcher "spawn"); `ascend(rank,
    args)` those of rank `rank` of Ascend's RANK_ID loop (default: `args` unchanged)."""

    target: tuple
    spawn: object = None
    ascend: object = field(default=lambda rank, args: args)

    def argv(self, *args):
        """`python *target *args`."""
        return [PY, *self.target, *map(str, args)]


def script(*paths):
    """A Python file (and its arguments, e.g. a wrapper and the script it runs) as a Program."""
    return Program(tuple(str(path) for path in paths))


# main.py: --multiprocessing-distributed spawns; Ascend's scripts give each rank its device
# and a one-rank view of the job that RANK_ID/RANK_SIZE override.
MAIN = Program(
    ("main.py",),
    spawn=lambda nproc, args: ["--multiprocessing-distributed", "--nproc-per-node", nproc, *args],
    ascend=lambda rank, args: [
        "--gpu",
        rank,
        "--rank",
        0,
        "--world-size",
        1,
        "--multiprocessing-distributed",
        *args,
    ],
)
# `python -m devicekit COMMAND ...`: the command's own --nproc-per-node spawns.
DEVICEKIT = Program(
    ("-m", "devicekit"), spawn=lambda nproc, args: [*args, "--nproc-per-node", nproc]
)


def devicekit_cmd(*args):
    """`python -m devicekit ARGS`, started plainly."""
    return DEVICEKIT.argv(*args)


class Command(NamedTuple):
    """One process of a run: its name (its output files), argv, and the variables the
    launcher sets for it (on top of the child's environment)."""

    name: str
    argv: list
    env: dict


def log_dir(directory):
    """Where run_8p.sh writes the rank logs of a run started with `directory`."""
    return Path(directory) / "logs"


def commands(launcher, program, args, nproc, directory, *, name=None, port=None, launcher_args=()):
    """The processes that start `program` (a Program, or the path of a script) with `args`
    the way `launcher` does with `nproc` ranks. `directory`: the run's folder (run_8p.sh's
    logs go to its logs/); `name`: the process's name, or the ranks' name before their
    number (default the launcher's); `port`: the master port of the per-rank and MPI
    launchers (default a free one); `launcher_args`: torchrun's own options (--max-restarts 1)."""
    # Imported when first needed: importing devicekit before torch would set
    # TORCH_DEVICE_BACKEND_AUTOLOAD for every later child (see conftest).
    from devicekit.environments import find_free_port

    if not isinstance(program, Program):
        program = script(program)
    args = [str(arg) for arg in args]
    name = name or launcher
    if launcher == "torchrun":
        argv = [PY, "-m", "torch.distributed.run", "--standalone", *map(str, launcher_args)]
        argv += ["--nproc-per-node", str(nproc), *program.target, *args]
        return [Command(name, argv, {})]
    assert not launcher_args, f"{launcher} takes no launcher_args"
    if launcher == "launch":
        # Its static rendezvous defaults to port 29500: give it a free one. It appends
        # --local-rank=N to every worker's command line.
        argv = [PY, "-m", "torch.distributed.launch", "--nproc_per_node", str(nproc)]
        argv += ["--master_addr", "127.0.0.1", "--master_port", str(find_free_port())]
        return [Command(name, [*argv, *program.target, *args], {})]
    if launcher == "spawn":
        assert program.spawn is not None, f"{program.target} cannot start ranks itself"
        return [Command(name, program.argv(*program.spawn(nproc, args)), {})]
    if launcher == "python":
        env = {} if nproc is None else {"DEVICEKIT_NPROC_PER_NODE": str(nproc)}
        return [Command(name, program.argv(*args), env)]
    if launcher == "single":
        assert nproc in (None, 1), nproc
        return [Command(name, program.argv(*args), {})]
    if launcher in MPI:
        # Each rank reads its launcher's own variables (OMPI_COMM_WORLD_*, PMI_*/MPI_LOCAL*)
        # and meets the others in devicekit's rendezvous, at 29500 unless MASTER_PORT says
        # otherwise: a free one, so that runs side by side never meet. Both launchers pass
        # their environment on to the ranks they start on this machine.
        env = {"MASTER_PORT": str(find_free_port() if port is None else port)}
        if launcher == "openmpi":
            argv = [MPI[launcher], "-np", str(nproc), "--oversubscribe"]
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        else:  # MPICH starts more ranks than cores without being asked
            argv = [MPI[launcher], "-n", str(nproc)]
        return [Command(name, [*argv, *program.argv(*args)], env)]
    if launcher == "deepspeed":
        argv = ["deepspeed", "--num_gpus", str(nproc), "--master_port", str(find_free_port())]
        return [Command(name, [*argv, *program.target, *args], {})]
    if launcher == "run_8p":
        env = {"NPROC_PER_NODE": str(nproc), "LOG_DIR": str(log_dir(directory)), "PYTHON": PY}
        if program.target != MAIN.target:  # main.py is the script's default
            assert len(program.target) == 1, f"run_8p.sh runs a script, not {program.target}"
            env["SCRIPT"] = program.target[0]
        return [Command(name, ["bash", RUN_8P, *args], env)]
    assert launcher in PER_RANK, f"unknown launcher {launcher!r}"
    port = str(find_free_port() if port is None else port)
    master = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    ranks = []
    for rank in range(nproc):
        argv, env = program.argv(*args), dict(master)
        if launcher == "ascend":
            argv = program.argv(*program.ascend(rank, args))
            env.update(RANK_ID=str(rank), RANK_SIZE=str(nproc))
        elif launcher == "nodes":
            env.update(RANK=str(rank), WORLD_SIZE=str(nproc), GROUP_RANK=str(rank))
            env.update(LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
        else:
            env.update(RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc))
            if launcher == "env":
                env["LOCAL_RANK"] = str(rank)
            else:
                argv = program.argv("--local_rank", rank, *args)
        ranks.append(Command(f"{name}{rank}", argv, env))
    return ranks


def start(
    procs,
    launcher,
    program,
    args,
    nproc,
    directory,
    *,
    env=None,
    name=None,
    port=None,
    launcher_args=(),
    **extra,
):
    """Start the processes of commands() with `procs` (a support.processes.Processes); the
    Popen of each, rank 0's (or the launcher's) first. Each gets `env` (default
    child_env()), the launcher's variables, and the variables `extra`."""
    base = child_env() if env is None else env
    extra = {key: str(value) for key, value in extra.items()}
    return [
        procs.start(command.name, command.argv, {**base, **command.env, **extra})
        for command in commands(
            launcher,
            program,
            args,
            nproc,
            directory,
            name=name,
            port=port,
            launcher_args=launcher_args,
        )
    ]


def output_text(results, directory, launcher):
    """Everything a run printed: every process's stdout and stderr and, for run_8p.sh (whose
    ranks other than 0 write only to their log), every rank log."""
    text = "".join(r.stdout + r.stderr for r in results)
    if launcher == "run_8p":
        text += "".join(p.read_text() for p in sorted(log_dir(directory).glob("rank_*.log")))
    return text

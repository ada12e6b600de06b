"""Launch environments: what started this process, and who it is in the run.

One module per environment, each a LaunchEnvironment that answers "is this mine?"
(`detect`) and "who is this process?" (`context`). The registry is the ordered list
ENVIRONMENTS below: the first environment whose detect() says yes describes the process.
Adding a launcher means one module and one entry in that list.

The order, and why: a process started inside another launcher's job sees the variables of
both, and the launcher that started *it* (the innermost) sets its own per process while the
outer ones' are inherited. So:

1. deepspeed: torchrun's RANK/WORLD_SIZE/LOCAL_RANK plus LOCAL_SIZE/CROSS_*, no
   LOCAL_WORLD_SIZE; before launch, because DeepSpeed also appends --local_rank=N.
2. launch: torchrun's variables plus the --local-rank argument.
3. torchrun: torchrun's variables plus TORCHELASTIC_RUN_ID (also under Slurm, MPI or a
   PyTorchJob that runs torchrun).
4. pytorchjob: RANK/WORLD_SIZE without LOCAL_RANK, inside Kubernetes.
5. env: torchrun's variables from anything else (run_8p.sh, a shell loop).
6. rank_table: RANK_TABLE_FILE with RANK_ID; before ascend, which reads RANK_ID alone.
7. ascend: RANK_ID and RANK_SIZE (a shell loop, possibly inside a Slurm allocation).
8. mpi (Open MPI), 9. mpich (MPICH, Intel MPI): before slurm, because mpirun inside a Slurm
   job starts its daemons with srun, so every rank inherits a daemon's SLURM_PROCID (the
   node's index), while the MPI variables are the rank's own.
10. slurm: SLURM_PROCID with SLURM_NTASKS > 1 (srun's tasks).
11. spawn, 12. cli, 13. single: no launcher; the script's own arguments decide.
"""

import os
from collections.abc import Mapping

from devicekit.environments.ascend import Ascend
from devicekit.environments.base import LaunchEnvironment
from devicekit.environments.context import LaunchContext
from devicekit.environments.deepspeed import DeepSpeed
from devicekit.environments.distributed_launch import DistributedLaunch, pop_local_rank
from devicekit.environments.env import EnvVariables
from devicekit.environments.explicit import Explicit
from devicekit.environments.mpich import Mpich
from devicekit.environments.open_mpi import OpenMpi
from devicekit.environments.options import LaunchOptions
from devicekit.environments.pytorchjob import PyTorchJob
from devicekit.environments.rank_table import RankTable
from devicekit.environments.reading import REFERENCE_DIST_URL, find_free_port
from devicekit.environments.single import Single
from devicekit.environments.slurm import Slurm
from devicekit.environments.spawn import Spawn
from devicekit.environments.torchrun import Torchrun
from devicekit.kinds.base import DeviceKind

ENVIRONMENTS: tuple[LaunchEnvironment, ...] = (
    DeepSpeed(),
    DistributedLaunch(),
    Torchrun(),
    PyTorchJob(),
    EnvVariables(),
    RankTable(),
    Ascend(),
    OpenMpi(),
    Mpich(),
    Slurm(),
    Spawn(),
    Explicit(),
    Single(),
)

# The variables each environment reads, in detection order: what doctor reports and what
# tests and benchmarks clear to start a process that no launcher has touched.
VARIABLES: dict[str, tuple[str, ...]] = {env.name: tuple(env.variables) for env in ENVIRONMENTS}
ALL_VARIABLES: tuple[str, ...] = tuple(
    dict.fromkeys(name for names in VARIABLES.values() for name in names)
)


def detect(
    options: LaunchOptions | None = None, environ: Mapping[str, str] | None = None
) -> LaunchEnvironment:
    """The environment that started this process (the first in ENVIRONMENTS that says so;
    `single` when none does). Reads only; never raises."""
    options = options or LaunchOptions()
    environ = os.environ if environ is None else environ
    return next(env for env in ENVIRONMENTS if env.detect(environ, options))


def launcher_of(environ: Mapping[str, str] | None = None) -> str | None:
    """The name of the launcher whose variables this environment shows ("torchrun", "env",
    "slurm", ...), or None when no launcher started the process. Reads only; validates
    nothing."""
    env = detect(LaunchOptions(), environ)
    return env.name if env.started_by_launcher else None


def resolve_launch(
    options: LaunchOptions | None = None,
    environ: Mapping[str, str] | None = None,
    kind: DeviceKind | None = None,
) -> LaunchContext:
    """Return the LaunchContext for this process.

    `options` are a script's or trainer's launch arguments, `environ` the environment
    (os.environ by default) and `kind` the DeviceKind whose visible devices bound the
    device index. Inconsistent inputs raise UsageError naming the variable or flag.
    """
    options = options or LaunchOptions()
    environ = os.environ if environ is None else environ
    return detect(options, environ).context(options, environ, kind)


__all__ = [
    "ALL_VARIABLES",
    "ENVIRONMENTS",
    "REFERENCE_DIST_URL",
    "VARIABLES",
    "LaunchContext",
    "LaunchEnvironment",
    "LaunchOptions",
    "detect",
    "find_free_port",
    "launcher_of",
    "pop_local_rank",
    "resolve_launch",
]

"""Launch environments: what started this process, and who it is in the run.

One module per environment, named for it (its NAME), each satisfying the LaunchEnvironment
Protocol of devicekit.environments.base: it answers "is this mine?" (`detect`) and "who is
this process?" (`context`). The registry is the ordered tuple ENVIRONMENTS below: the first
environment whose detect() says yes describes the process. Adding a launcher means one
module and one line in that tuple (docs/extending.md).

Beside the environment modules: base (the Protocol), context (LaunchContext), options
(LaunchOptions), parsing (numbers, hosts, URLs), master (where the ranks meet),
cross_checks (ranks, options and devices that must agree), hostlist (Slurm's node lists),
and the readings several environments share: torchrun_family (torchrun, launch, env) and
mpi_family (mpi, mpich).

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

from devicekit.environments import (
    ascend,
    cli,
    deepspeed,
    env,
    launch,
    mpi,
    mpich,
    pytorchjob,
    rank_table,
    single,
    slurm,
    spawn,
    torchrun,
)
from devicekit.environments.base import LaunchEnvironment, started_by_launcher, variables_set
from devicekit.environments.context import LaunchContext
from devicekit.environments.launch import pop_local_rank
from devicekit.environments.master import REFERENCE_DIST_URL, find_free_port
from devicekit.environments.options import LaunchOptions
from devicekit.environments.parsing import parse_dist_url
from devicekit.kinds.base import DeviceKind

ENVIRONMENTS: tuple[LaunchEnvironment, ...] = (
    deepspeed,
    launch,
    torchrun,
    pytorchjob,
    env,
    rank_table,
    ascend,
    mpi,
    mpich,
    slurm,
    spawn,
    cli,
    single,
)

# The variables each environment reads, in detection order: what doctor reports and what
# tests and benchmarks clear to start a process that no launcher has touched.
VARIABLES: dict[str, tuple[str, ...]] = {
    environment.NAME: environment.VARIABLES for environment in ENVIRONMENTS
}
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
    return next(environment for environment in ENVIRONMENTS if environment.detect(environ, options))


def launcher_of(environ: Mapping[str, str] | None = None) -> str | None:
    """The name of the launcher whose variables this environment shows ("torchrun", "env",
    "slurm", ...), or None when no launcher started the process. Reads only; validates
    nothing."""
    environment = detect(LaunchOptions(), environ)
    return environment.NAME if started_by_launcher(environment) else None


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
    "parse_dist_url",
    "pop_local_rank",
    "resolve_launch",
    "started_by_launcher",
    "variables_set",
]

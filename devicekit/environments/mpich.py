"""MPICH and Intel MPI (the Hydra process manager): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID and
MPI_LOCALNRANKS per process (read as devicekit.environments.mpi_family says). Slurm's
`srun --mpi=pmi2` sets PMI_RANK/PMI_SIZE too, but not MPI_LOCALRANKID: such tasks are
Slurm's."""

from collections.abc import Mapping

from devicekit.environments.context import LaunchContext
from devicekit.environments.mpi_family import mpi_context
from devicekit.environments.options import LaunchOptions
from devicekit.environments.parsing import count
from devicekit.kinds.base import DeviceKind

NAME = "mpich"
RANK_NAMES = ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
VARIABLES: tuple[str, ...] = (*RANK_NAMES, "MASTER_ADDR", "MASTER_PORT")


def detect(environ: Mapping[str, str], options: LaunchOptions) -> bool:
    """Whether mpiexec (Hydra) started this process as one of several ranks."""
    return count(environ, "PMI_SIZE") > 1 and "MPI_LOCALRANKID" in environ


def context(
    options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
) -> LaunchContext:
    """Who this rank is, from Hydra's variables."""
    return mpi_context(
        options,
        environ,
        kind,
        name=NAME,
        names=RANK_NAMES,
        launcher="mpiexec",
        count_flag="-n",
        per_node_flag="-ppn",
    )

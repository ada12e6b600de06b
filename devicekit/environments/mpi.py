"""Open MPI's mpirun: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
and OMPI_COMM_WORLD_LOCAL_SIZE per process (read as devicekit.environments.mpi_family says)."""

from collections.abc import Mapping

from devicekit.environments.context import LaunchContext
from devicekit.environments.mpi_family import mpi_context
from devicekit.environments.options import LaunchOptions
from devicekit.environments.parsing import count
from devicekit.kinds.base import DeviceKind

NAME = "mpi"
RANK_NAMES = (
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
)
VARIABLES: tuple[str, ...] = (*RANK_NAMES, "MASTER_ADDR", "MASTER_PORT")


def detect(environ: Mapping[str, str], options: LaunchOptions) -> bool:
    """Whether mpirun started this process as one of several ranks."""
    return count(environ, "OMPI_COMM_WORLD_SIZE") > 1


def context(
    options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
) -> LaunchContext:
    """Who this rank is, from Open MPI's variables."""
    return mpi_context(
        options,
        environ,
        kind,
        name=NAME,
        names=RANK_NAMES,
        launcher="mpirun",
        count_flag="-np",
        per_node_flag="-N",
    )

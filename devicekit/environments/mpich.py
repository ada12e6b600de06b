"""MPICH and Intel MPI (the Hydra process manager): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID and
MPI_LOCALNRANKS per process. Slurm's `srun --mpi=pmi2` sets PMI_RANK/PMI_SIZE too, but not
MPI_LOCALRANKID: such tasks are Slurm's."""

from collections.abc import Mapping

from devicekit.environments.mpi import MpiEnvironment
from devicekit.environments.options import LaunchOptions


class Mpich(MpiEnvironment):
    name = "mpich"
    names = ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
    variables = (*names, "MASTER_ADDR", "MASTER_PORT")
    launcher, count_flag, per_node_flag = "mpiexec", "-n", "-ppn"

    def detect(self, environ: Mapping[str, str], options: LaunchOptions) -> bool:
        return super().detect(environ, options) and "MPI_LOCALRANKID" in environ

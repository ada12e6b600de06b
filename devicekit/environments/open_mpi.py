"""Open MPI's mpirun: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
and OMPI_COMM_WORLD_LOCAL_SIZE per process."""

from devicekit.environments.mpi import MpiEnvironment


class OpenMpi(MpiEnvironment):
    name = "mpi"
    names = (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    )
    variables = (*names, "MASTER_ADDR", "MASTER_PORT")
    launcher, count_flag, per_node_flag = "mpirun", "-np", "-N"

"""What an MPI launcher hands each process: its rank, the world size, its rank and the
process count on its node; no master address (MASTER_ADDR is needed on several nodes).
Nodes are numbered rank // processes per node (mpirun's default, block placement). The
ranks meet in devicekit's rendezvous. Open MPI and MPICH/Intel MPI differ only in names.

More ranks on a node than it has visible devices are refused by every rank at once, naming
the launcher's count of the node's ranks: MPICH's mpiexec leaves the other ranks running
when one exits with an error (only a signal ends the job), so a refusal by the extra ranks
alone would leave the rest waiting for them until the rendezvous times out."""

from collections.abc import Mapping

from devicekit.environments.base import LaunchEnvironment
from devicekit.environments.context import LaunchContext
from devicekit.environments.options import LaunchOptions
from devicekit.environments.reading import (
    DEFAULT_PORT,
    check_device,
    check_node_fits,
    check_ranks,
    count,
    master,
    read_numbers,
    require,
)
from devicekit.kinds.base import DeviceKind


class MpiEnvironment(LaunchEnvironment):
    """An MPI launcher whose variables are (rank, size, local rank, local size)."""

    names: tuple[str, str, str, str] = ("", "", "", "")
    launcher = ""  # the command that starts the ranks, as users type it
    count_flag = ""  # its option for the number of ranks
    per_node_flag = ""  # its option for the number of ranks per node

    def detect(self, environ: Mapping[str, str], options: LaunchOptions) -> bool:
        return count(environ, self.names[1]) > 1

    def context(
        self, options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
    ) -> LaunchContext:
        rank_var, size_var, local_var, local_size_var = self.names
        values = read_numbers(environ, {rank_var: 0, size_var: 1, local_var: 0, local_size_var: 1})
        rank, world_size, local_rank = (
            require(values, name) for name in (rank_var, size_var, local_var)
        )
        local_world_size = values.get(local_size_var, world_size)
        check_ranks(
            rank,
            world_size,
            local_rank,
            local_world_size,
            (rank_var, size_var, local_var, local_size_var),
        )
        told = local_size_var if local_size_var in values else size_var
        check_node_fits(
            kind,
            local_world_size,
            f"{self.launcher} started {local_world_size} ranks on this node ({told}="
            f"{values[told]})",
            lambda devices: (
                f"start one rank per device, at most {devices} per node ({self.launcher} "
                f"{self.count_flag} {devices}, or {self.per_node_flag} {devices} on several "
                "nodes)"
            ),
        )
        nnodes = world_size // local_world_size
        addr, port = master(options, environ, nnodes, DEFAULT_PORT)
        ctx = LaunchContext(
            self.name,
            rank,
            local_rank,
            world_size,
            local_world_size,
            rank // local_world_size,
            nnodes,
            addr,
            port,
            local_rank,
        )
        return check_device(ctx, kind, local_var)

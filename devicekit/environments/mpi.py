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
    check_ranks,
    count,
    master,
    read_numbers,
    require,
    visible_note,
)
from devicekit.errors import UsageError
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
        self._check_node_fits(kind, local_world_size, values)
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

    def _check_node_fits(
        self, kind: DeviceKind | None, local_world_size: int, values: Mapping[str, int]
    ) -> None:
        """UsageError in every rank when the launcher started more ranks on this node than
        it has visible devices."""
        if kind is None or not kind.is_accelerator:
            return
        devices = kind.device_count()
        if not 0 < devices < local_world_size:
            return  # fits; no device at all is check_device's to report
        size_var, local_size_var = self.names[1], self.names[3]
        told = local_size_var if local_size_var in values else size_var
        raise UsageError(
            f"{self.launcher} started {local_world_size} ranks on this node ({told}="
            f"{local_world_size}) but only {devices} {kind.name} device(s) are visible"
            f"{visible_note(kind)}: start one rank per device, at most {devices} per node "
            f"({self.launcher} {self.count_flag} {devices}, or {self.per_node_flag} {devices} "
            "on several nodes)"
        )

"""What an MPI launcher hands each process, read for Open MPI (`mpi`) and MPICH/Intel MPI
(`mpich`), which differ only in names: its rank, the world size, its rank and the process
count on its node; no master address (MASTER_ADDR is needed on several nodes). Nodes are
numbered rank // processes per node (mpirun's default, block placement). The ranks meet in
devicekit's rendezvous.

More ranks on a node than it has visible devices are refused by every rank at once, naming
the launcher's count of the node's ranks: MPICH's mpiexec leaves the other ranks running
when one exits with an error (only a signal ends the job), so a refusal by the extra ranks
alone would leave the rest waiting for them until the rendezvous times out."""

from collections.abc import Mapping

from devicekit.environments.context import LaunchContext
from devicekit.environments.cross_checks import check_device, check_node_fits, check_ranks
from devicekit.environments.master import DEFAULT_PORT, master
from devicekit.environments.options import LaunchOptions
from devicekit.environments.parsing import read_numbers, require
from devicekit.kinds.base import DeviceKind


def mpi_context(
    options: LaunchOptions,
    environ: Mapping[str, str],
    kind: DeviceKind | None,
    *,
    name: str,
    names: tuple[str, str, str, str],
    launcher: str,
    count_flag: str,
    per_node_flag: str,
) -> LaunchContext:
    """Who this process is, as environment `name`, from the MPI launcher's variables
    `names` (rank, size, local rank, local size). `launcher` is the command that starts the
    ranks as users type it, `count_flag` its option for the number of ranks and
    `per_node_flag` that for the ranks per node (both named in the fix for too many ranks)."""
    rank_var, size_var, local_var, local_size_var = names
    values = read_numbers(environ, {rank_var: 0, size_var: 1, local_var: 0, local_size_var: 1})
    rank, world_size, local_rank = (
        require(values, variable) for variable in (rank_var, size_var, local_var)
    )
    local_world_size = values.get(local_size_var, world_size)
    check_ranks(rank, world_size, local_rank, local_world_size, names)
    told = local_size_var if local_size_var in values else size_var
    check_node_fits(
        kind,
        local_world_size,
        f"{launcher} started {local_world_size} ranks on this node ({told}={values[told]})",
        lambda devices: (
            f"start one rank per device, at most {devices} per node ({launcher} "
            f"{count_flag} {devices}, or {per_node_flag} {devices} on several nodes)"
        ),
    )
    nnodes = world_size // local_world_size
    addr, port = master(options, environ, nnodes, DEFAULT_PORT)
    ctx = LaunchContext(
        mode=name,
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        local_world_size=local_world_size,
        node_rank=rank // local_world_size,
        nnodes=nnodes,
        master_addr=addr,
        master_port=port,
        device_index=local_rank,
    )
    return check_device(ctx, kind, local_var)

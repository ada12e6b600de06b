"""No launcher; the script says who each process is: a trainer's --rank/--world-size
processes started by hand, or a script's own mp.spawn children calling
init_distributed(rank=..., world_size=...). The ranks meet in devicekit's rendezvous at
the init method URL, --addr/--port, MASTER_ADDR/MASTER_PORT, or loopback:29500."""

from collections.abc import Mapping

from devicekit.environments.context import LaunchContext
from devicekit.environments.cross_checks import check_device
from devicekit.environments.master import DEFAULT_PORT, master
from devicekit.environments.options import LaunchOptions
from devicekit.environments.parsing import to_int
from devicekit.errors import UsageError
from devicekit.kinds.base import DeviceKind

NAME = "cli"
VARIABLES: tuple[str, ...] = ("MASTER_ADDR", "MASTER_PORT")
STARTED_BY_LAUNCHER = False


def detect(environ: Mapping[str, str], options: LaunchOptions) -> bool:
    """Whether the script's options give ranks (a world size above 1, a rank above 0)."""
    return options.world_size not in (None, 1) or options.rank not in (None, 0)


def context(
    options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
) -> LaunchContext:
    """Who this process is, from the script's rank, world size and device options."""
    if options.world_size is None:
        raise UsageError(
            f"{options.show('rank', options.rank)} needs "
            f"{options.name('world_size')} (the number of processes) too; a "
            "single process needs neither"
        )
    world_size = to_int(options.world_size, options.name("world_size"), 1)
    if options.rank is None:
        raise UsageError(
            f"{options.show('world_size', world_size)} needs "
            f"{options.name('rank')} for this process too (or start the run "
            "with torchrun)"
        )
    rank = to_int(options.rank, options.name("rank"))
    if rank >= world_size:
        raise UsageError(
            f"{options.show('rank', rank)} is not below {options.show('world_size', world_size)}"
        )
    addr, port = master(options, environ, 1, DEFAULT_PORT)
    if options.gpu is not None:
        device_index, source = to_int(options.gpu, options.name("gpu")), options.name("gpu")
    elif options.local_rank is not None:
        device_index, source = options.local_rank, options.name("local_rank")
    else:
        # A trainer's --rank/--world-size processes each use device 0 unless told (the
        # reference's way); a script's own processes on one node use the device of
        # their rank.
        device_index, source = (0, options.name("gpu")) if options.cli else (rank, "rank")
    ctx = LaunchContext(
        mode=NAME,
        rank=rank,
        local_rank=device_index,
        world_size=world_size,
        local_world_size=world_size,
        node_rank=0,
        nnodes=1,
        master_addr=addr,
        master_port=port,
        device_index=device_index,
    )
    return check_device(ctx, kind, source)

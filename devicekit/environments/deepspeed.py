"""DeepSpeed's launcher (`deepspeed train.py`): RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_SIZE
(processes on this node), CROSS_RANK (node rank), CROSS_SIZE (nodes), MASTER_ADDR and
MASTER_PORT per process, and `--local_rank=N` appended unless `--no_local_rank`.

No LOCAL_WORLD_SIZE: read as torchrun's variables, 2 nodes x 8 would look like one node of
16. Nodes may run different numbers of processes (a hostfile's slots). DeepSpeed serves no
store: the ranks meet in devicekit's rendezvous.
"""

from collections.abc import Mapping

from devicekit.environments.context import LaunchContext
from devicekit.environments.cross_checks import (
    check_below,
    check_device,
    check_gpu_agrees,
    check_local_rank_agrees,
    device_source,
    refuse_spawning,
)
from devicekit.environments.options import LaunchOptions
from devicekit.environments.parsing import PORT, listed_device, read_numbers, require, to_host
from devicekit.environments.torchrun_family import has_rank_variables
from devicekit.errors import UsageError
from devicekit.kinds.base import DeviceKind

_FIX = (
    ": DeepSpeed's launcher exports RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_SIZE, CROSS_RANK, "
    "CROSS_SIZE, MASTER_ADDR and MASTER_PORT"
)


NAME = "deepspeed"
VARIABLES: tuple[str, ...] = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_SIZE",
    "CROSS_RANK",
    "CROSS_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)


def detect(environ: Mapping[str, str], options: LaunchOptions) -> bool:
    """Whether DeepSpeed's launcher started this process: torchrun's variables with
    LOCAL_SIZE/CROSS_*, and no LOCAL_WORLD_SIZE."""
    # With LOCAL_WORLD_SIZE set (DeepSpeed's elastic agent is torchrun's) torchrun's
    # reading is the right one.
    return (
        has_rank_variables(environ)
        and "LOCAL_WORLD_SIZE" not in environ
        and any(name in environ for name in ("LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE"))
    )


def context(
    options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
) -> LaunchContext:
    """Who this process is, from DeepSpeed's variables."""
    refuse_spawning(options)
    values = read_numbers(
        environ,
        {
            "RANK": 0,
            "WORLD_SIZE": 1,
            "LOCAL_RANK": 0,
            "LOCAL_SIZE": 1,
            "CROSS_RANK": 0,
            "CROSS_SIZE": 1,
            "MASTER_PORT": PORT,
        },
    )
    rank, world_size, local_rank, local_size, node_rank, nnodes = (
        require(values, name, _FIX)
        for name in (
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_SIZE",
            "CROSS_RANK",
            "CROSS_SIZE",
        )
    )
    for variable in ("MASTER_ADDR", "MASTER_PORT"):
        if not environ.get(variable):
            raise UsageError(f"{variable} is not set" + _FIX)
    check_below("RANK", rank, "WORLD_SIZE", world_size, f": ranks run from 0 to {world_size - 1}")
    check_below("LOCAL_RANK", local_rank, "LOCAL_SIZE", local_size)
    check_below("CROSS_RANK", node_rank, "CROSS_SIZE", nnodes)
    if local_size > world_size or nnodes > world_size:
        raise UsageError(
            f"LOCAL_SIZE={local_size} and CROSS_SIZE={nnodes} do not fit "
            f"WORLD_SIZE={world_size}: check the hostfile's slots"
        )
    check_local_rank_agrees(options, local_rank)
    check_gpu_agrees(options, local_rank)
    ctx = LaunchContext(
        mode=NAME,
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        local_world_size=local_size,
        node_rank=node_rank,
        nnodes=nnodes,
        master_addr=to_host(environ["MASTER_ADDR"], "MASTER_ADDR"),
        master_port=values["MASTER_PORT"],
        device_index=listed_device(options, local_rank, "LOCAL_RANK"),
    )
    return check_device(ctx, kind, device_source(options, "LOCAL_RANK"))

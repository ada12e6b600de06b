"""torchrun's variables, read for each launcher that exports them: torchrun,
torch.distributed.launch and a shell loop (`env`); DeepSpeed's launcher sets them too.
RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (or NODE_RANK), MASTER_ADDR and
MASTER_PORT per process."""

from collections.abc import Mapping

from devicekit.environments.context import LaunchContext
from devicekit.environments.cross_checks import (
    check_device,
    check_gpu_agrees,
    check_local_rank_agrees,
    check_ranks,
    refuse_spawning,
)
from devicekit.environments.options import LaunchOptions
from devicekit.environments.parsing import PORT, listed_device, read_numbers, require, to_host
from devicekit.errors import UsageError
from devicekit.kinds.base import DeviceKind

RANK_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)
_FIX = (
    ": the launcher must export RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and "
    "MASTER_PORT (torchrun does)"
)


def has_rank_variables(environ: Mapping[str, str]) -> bool:
    """Whether a launcher of the torchrun family (or one that copies it) set any of its
    per-process variables."""
    return any(name in environ for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


def rank_variables_context(
    options: LaunchOptions,
    environ: Mapping[str, str],
    kind: DeviceKind | None,
    *,
    name: str,
    launcher_store: bool,
) -> LaunchContext:
    """The context torchrun's variables describe, as environment `name`; `launcher_store`
    says whether the ranks join the store the launcher serves (env://)."""
    refuse_spawning(options)
    values = read_numbers(
        environ,
        {
            "RANK": 0,
            "WORLD_SIZE": 1,
            "LOCAL_RANK": 0,
            "LOCAL_WORLD_SIZE": 1,
            "GROUP_RANK": 0,
            "NODE_RANK": 0,
            "MASTER_PORT": PORT,
            "TORCHELASTIC_RESTART_COUNT": 0,
        },
    )
    rank = require(values, "RANK", _FIX)
    world_size = require(values, "WORLD_SIZE", _FIX)
    local_name = "LOCAL_RANK"
    if "LOCAL_RANK" in values:
        local_rank = values["LOCAL_RANK"]
        check_local_rank_agrees(options, local_rank)
    elif options.local_rank is not None:
        local_rank, local_name = options.local_rank, options.name("local_rank")
    else:
        raise UsageError("LOCAL_RANK is not set" + _FIX)
    for variable in ("MASTER_ADDR", "MASTER_PORT"):
        if not environ.get(variable):
            raise UsageError(f"{variable} is not set" + _FIX)
    local_world_size = values.get("LOCAL_WORLD_SIZE", world_size)
    check_ranks(
        rank,
        world_size,
        local_rank,
        local_world_size,
        ("RANK", "WORLD_SIZE", local_name, "LOCAL_WORLD_SIZE"),
    )
    nnodes = world_size // local_world_size
    node_rank = rank // local_world_size
    for variable in ("GROUP_RANK", "NODE_RANK"):
        if variable in values:
            node_rank = values[variable]
            if node_rank >= nnodes:
                raise UsageError(
                    f"{variable}={node_rank} is not below the {nnodes} node(s) "
                    f"of WORLD_SIZE={world_size} / LOCAL_WORLD_SIZE="
                    f"{local_world_size}: node ranks run from 0 to {nnodes - 1}"
                )
            break
    check_gpu_agrees(options, local_rank)
    ctx = LaunchContext(
        mode=name,
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        local_world_size=local_world_size,
        node_rank=node_rank,
        nnodes=nnodes,
        master_addr=to_host(environ["MASTER_ADDR"], "MASTER_ADDR"),
        master_port=values["MASTER_PORT"],
        device_index=listed_device(options, local_rank, "LOCAL_RANK"),
        launcher_store=launcher_store,
        restarts=values.get("TORCHELASTIC_RESTART_COUNT", 0),
    )
    return check_device(
        ctx, kind, "LOCAL_RANK" if not options.device_list else options.name("device_list")
    )

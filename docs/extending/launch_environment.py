"""A worked example of a launch environment: Flux (`flux run -N 2 -n 16 python train.py`),
the resource manager of several HPC centres, which devicekit does not read yet.

Flux's job shell exports to every task FLUX_TASK_RANK (its rank), FLUX_TASK_LOCAL_ID (its
rank on its node), FLUX_JOB_SIZE (the job's tasks), FLUX_JOB_NNODES (its nodes) and
FLUX_JOB_ID, and no master address: node 0's comes from MASTER_ADDR (or --addr, --dist-url)
on several nodes, loopback on one. Tasks are placed in blocks, the same number on each node.
Flux serves no store: the ranks meet in devicekit's rendezvous.

A launch environment is a module that satisfies the LaunchEnvironment Protocol
(devicekit/environments/base.py): NAME, VARIABLES, detect() and context() at module level;
STARTED_BY_LAUNCHER is left out, so it is True. To add this one to devicekit: this file as
devicekit/environments/flux.py, and one line, `flux,`, in ENVIRONMENTS
(devicekit/environments/__init__.py) just before `slurm`: a Flux instance started inside a
Slurm job (`srun flux start`) hands its tasks the broker's SLURM_PROCID and SLURM_NTASKS,
while the FLUX_* variables are the task's own. tests/test_environments.py loads this file
and tries it at that place.
"""

from collections.abc import Mapping

from devicekit.environments.context import LaunchContext
from devicekit.environments.cross_checks import (
    check_below,
    check_device,
    check_gpu_agrees,
    check_node_fits,
    refuse_spawning,
)
from devicekit.environments.master import DEFAULT_PORT, master
from devicekit.environments.options import LaunchOptions
from devicekit.environments.parsing import count, read_numbers, require
from devicekit.errors import UsageError
from devicekit.kinds.base import DeviceKind

NAME = "flux"  # the LaunchContext.mode, as launch lines print it ("flux: rank 3/16, ...")
VARIABLES: tuple[str, ...] = (  # every variable it reads: doctor shows them, tests clear them
    "FLUX_TASK_RANK",
    "FLUX_TASK_LOCAL_ID",
    "FLUX_JOB_SIZE",
    "FLUX_JOB_NNODES",
    "FLUX_JOB_ID",
    "MASTER_ADDR",
    "MASTER_PORT",
)
_FIX = (
    ": Flux's job shell exports FLUX_TASK_RANK, FLUX_TASK_LOCAL_ID, FLUX_JOB_SIZE and "
    "FLUX_JOB_NNODES to every task"
)


def detect(environ: Mapping[str, str], options: LaunchOptions) -> bool:
    """Whether Flux started this process as one of several tasks. Reads only and never
    raises (`count` takes a malformed value for 1): context() names the mistakes."""
    return count(environ, "FLUX_JOB_SIZE") > 1 and "FLUX_TASK_RANK" in environ


def context(
    options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
) -> LaunchContext:
    """Who this task is, from the job shell's variables; `kind` bounds the device index."""
    refuse_spawning(
        options,
        "Flux started this process as one of its tasks (FLUX_TASK_RANK, FLUX_JOB_SIZE)",
        "and start one task per device (flux run --tasks-per-node=DEVICES)",
    )
    # Set but malformed variables are named first, then missing ones.
    values = read_numbers(
        environ,
        {"FLUX_TASK_RANK": 0, "FLUX_JOB_SIZE": 1, "FLUX_TASK_LOCAL_ID": 0, "FLUX_JOB_NNODES": 1},
    )
    rank, world_size, local_rank, nnodes = (
        require(values, variable, _FIX)
        for variable in ("FLUX_TASK_RANK", "FLUX_JOB_SIZE", "FLUX_TASK_LOCAL_ID", "FLUX_JOB_NNODES")
    )
    check_below(
        "FLUX_TASK_RANK",
        rank,
        "FLUX_JOB_SIZE",
        world_size,
        f": ranks run from 0 to {world_size - 1}",
    )
    if world_size % nnodes:
        raise UsageError(
            f"FLUX_JOB_SIZE={world_size} is not a multiple of FLUX_JOB_NNODES={nnodes}: start "
            "the same number of tasks on every node (flux run -N NODES --tasks-per-node=N)"
        )
    local_world_size = world_size // nnodes
    check_below("FLUX_TASK_LOCAL_ID", local_rank, "FLUX_JOB_SIZE/FLUX_JOB_NNODES", local_world_size)
    check_gpu_agrees(options, local_rank, "FLUX_TASK_LOCAL_ID")
    check_node_fits(
        kind,
        local_world_size,
        f"flux run started {local_world_size} tasks on this node (FLUX_JOB_SIZE={world_size} "
        f"over FLUX_JOB_NNODES={nnodes})",
        lambda devices: (
            f"start one task per device, at most {devices} per node "
            f"(flux run --tasks-per-node={devices})"
        ),
    )
    addr, port = master(options, environ, nnodes, DEFAULT_PORT)
    ctx = LaunchContext(
        mode=NAME,
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
    return check_device(ctx, kind, "FLUX_TASK_LOCAL_ID")

"""Slurm's srun: per task SLURM_PROCID (rank), SLURM_NTASKS (world size), SLURM_LOCALID
(local rank), SLURM_NODEID (node), the tasks per node, the node list and SLURM_JOB_ID.

Tasks per node come from SLURM_STEP_TASKS_PER_NODE (the step's own layout), else
SLURM_TASKS_PER_NODE, else SLURM_NTASKS_PER_NODE, in Slurm's form `4`, `4(x2)` or
`4(x2),3` (nodes may run different numbers of tasks). Slurm exports no master: unless
MASTER_ADDR (or --addr/--dist-url) says otherwise, node 0 is the first host of
SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST), and the port, unless MASTER_PORT (or
--port), is 15000 + the last four digits of SLURM_JOB_ID, as Lightning derives it, so
every task agrees without talking. The ranks meet in devicekit's rendezvous.

sbatch's batch script also carries SLURM_PROCID=0 and SLURM_NTASKS, but no SLURM_STEP_ID
(only srun's tasks are a step): a script that starts Python there without srun is refused
at once, where it would wait for peers that never come; so are more tasks on a node than
it has devices, by every task (srun lets the others run on when one fails). A requeued job
(preemption, `scontrol requeue`) runs again under the same job id with SLURM_RESTART_COUNT
set, which the context reports as its restart.
"""

import re
from collections.abc import Mapping

from devicekit.environments.context import LaunchContext
from devicekit.environments.cross_checks import (
    check_below,
    check_device,
    check_node_fits,
    refuse_spawning,
)
from devicekit.environments.hostlist import first_host
from devicekit.environments.master import DEFAULT_PORT, master
from devicekit.environments.options import LaunchOptions
from devicekit.environments.parsing import PORT, count, read_numbers, require, to_int
from devicekit.errors import UsageError
from devicekit.kinds.base import DeviceKind

_LAYOUT_VARIABLES = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE")
_NODE_LISTS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST")
_FIX = ": srun exports SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID to every task"
PORT_BASE = 15000

NAME = "slurm"
VARIABLES: tuple[str, ...] = (
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    *_LAYOUT_VARIABLES,
    *_NODE_LISTS,
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_RESTART_COUNT",
    "MASTER_ADDR",
    "MASTER_PORT",
)


def tasks_per_node(variable: str, value: str) -> list[tuple[int, int]]:
    """Slurm's compressed tasks-per-node list as (tasks, nodes) runs: `4(x2),3` ->
    [(4, 2), (3, 1)]. Kept compressed: `1(x99999999)` is a count, not a list to build."""
    runs = []
    for item in value.split(","):
        match = re.fullmatch(r"\s*([0-9]+)(?:\(x([0-9]+)\))?\s*", item)
        if (
            not match
            or len(match.group(1)) > 18
            or len(match.group(2) or "") > 18
            or int(match.group(1)) < 1
            or (match.group(2) and int(match.group(2)) < 1)
        ):
            raise UsageError(
                f"{variable}={value!r} is not Slurm's tasks-per-node form "
                "(e.g. 4, 4(x2) or 4(x2),3)"
            )
        runs.append((int(match.group(1)), int(match.group(2) or 1)))
    return runs


def _nodes(runs: list[tuple[int, int]]) -> int:
    return sum(nodes for _, nodes in runs)


def _tasks_of(runs: list[tuple[int, int]], node: int) -> int:
    """How many tasks node `node` runs (below _nodes(runs))."""
    for tasks, nodes in runs:
        if node < nodes:
            return tasks
        node -= nodes
    raise IndexError(node)


def _node_of(runs: list[tuple[int, int]], rank: int) -> int:
    """The node of task `rank` under block distribution (below the runs' total)."""
    node = 0
    for tasks, nodes in runs:
        if rank < tasks * nodes:
            return node + rank // tasks
        rank -= tasks * nodes
        node += nodes
    raise IndexError(rank)


def job_port(environ: Mapping[str, str]) -> int:
    """15000 + the last four digits of SLURM_JOB_ID (29500 without a job id)."""
    if "SLURM_JOB_ID" not in environ:
        return DEFAULT_PORT
    return PORT_BASE + to_int(environ["SLURM_JOB_ID"], "SLURM_JOB_ID") % 10000


def _node0(environ: Mapping[str, str]) -> str | None:
    for variable in _NODE_LISTS:
        if environ.get(variable):
            return first_host(variable, environ[variable])
    return None


def detect(environ: Mapping[str, str], options: LaunchOptions) -> bool:
    """Whether srun started this process as one of several tasks."""
    return count(environ, "SLURM_NTASKS") > 1 and "SLURM_PROCID" in environ


def context(
    options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
) -> LaunchContext:
    """Who this task is, from srun's variables."""
    values = read_numbers(
        environ,
        {
            "SLURM_PROCID": 0,
            "SLURM_NTASKS": 1,
            "SLURM_LOCALID": 0,
            "SLURM_NODEID": 0,
            "SLURM_RESTART_COUNT": 0,
            "MASTER_PORT": PORT,
        },
    )
    if "SLURM_JOB_ID" in environ and "SLURM_STEP_ID" not in environ:
        raise UsageError(
            f"this is sbatch's batch script, not one of srun's tasks (SLURM_NTASKS="
            f"{environ['SLURM_NTASKS']} but no SLURM_STEP_ID): start the ranks with srun "
            "(srun python SCRIPT), or run launch/run_8p.sh in one task per node"
        )
    rank, world_size, local_rank = (
        require(values, name, _FIX) for name in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")
    )
    # The reference example's multi-node idiom (one task per node, each spawning its
    # devices) would run one process per node here: the tasks are the ranks.
    refuse_spawning(
        options,
        f"Slurm started this process as task {rank} of {world_size} (SLURM_PROCID, SLURM_NTASKS)",
        "and start one task per device (srun --ntasks-per-node=DEVICES), or run torchrun "
        "or launch/run_8p.sh in one task per node",
    )
    check_below(
        "SLURM_PROCID",
        rank,
        "SLURM_NTASKS",
        world_size,
        f": ranks run from 0 to {world_size - 1}",
    )
    layout = next((variable for variable in _LAYOUT_VARIABLES if environ.get(variable)), None)
    layout_shown = "" if layout is None else f"{layout}={environ[layout]!r}"
    runs = [(world_size, 1)] if layout is None else tasks_per_node(layout, environ[layout])
    if _nodes(runs) == 1:
        # One count: every node runs that many tasks.
        tasks = runs[0][0]
        if world_size % tasks:
            raise UsageError(
                f"SLURM_NTASKS={world_size} is not a multiple of {layout}="
                f"{tasks}: every node must run the same number of ranks"
            )
        runs = [(tasks, world_size // tasks)]
    elif sum(tasks * nodes for tasks, nodes in runs) != world_size:
        raise UsageError(
            f"{layout_shown} adds up to "
            f"{sum(tasks * nodes for tasks, nodes in runs)} tasks but "
            f"SLURM_NTASKS={world_size}"
        )
    nnodes = _nodes(runs)
    node_rank = values.get("SLURM_NODEID")
    if node_rank is None:  # block distribution, Slurm's default
        node_rank = _node_of(runs, rank)
    if node_rank >= nnodes:
        told = (
            f"{layout_shown} describes"
            if layout
            else "SLURM_NTASKS alone describes (no tasks-per-node variable is set)"
        )
        raise UsageError(f"SLURM_NODEID={node_rank} is not below the {nnodes} node(s) that {told}")
    local_world_size = _tasks_of(runs, node_rank)
    check_node_fits(
        kind,
        local_world_size,
        f"srun started {local_world_size} tasks on this node "
        f"({layout_shown or f'SLURM_NTASKS={world_size}'})",
        lambda devices: (
            f"start one task per device, at most {devices} per node (srun "
            f"--ntasks-per-node={devices}), each task seeing all of the node's devices"
        ),
    )
    addr, port = master(options, environ, nnodes, job_port(environ), lambda: _node0(environ))
    ctx = LaunchContext(
        mode=NAME,
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        local_world_size=local_world_size,
        node_rank=node_rank,
        nnodes=nnodes,
        master_addr=addr,
        master_port=port,
        device_index=local_rank,
        restarts=values.get("SLURM_RESTART_COUNT", 0),
    )
    return check_device(ctx, kind, "SLURM_LOCALID")

"""Every launch environment read from the variables its launcher really exports (names as
each launcher's documentation and sources give them), on one node and on 2 nodes x 8,
the bad cases named in one line, the detection order, doctor's facts, and a two-node run
started the Slurm way in network namespaces."""

import importlib.util
import json
import re

import pytest

from devicekit import doctor, environments
from devicekit.environments import (
    ALL_VARIABLES,
    ENVIRONMENTS,
    VARIABLES,
    LaunchOptions,
    launcher_of,
    resolve_launch,
)
from devicekit.errors import UsageError
from support.launchers import PY
from support.paths import REPO
from support.time_limit import _hard_time_limit, time_limit  # noqa: F401  (autouse fixture)
from support.tracked import GONE_BOUND_S, Tracked
from support.two_nodes import (  # noqa: F401  (the fixture two_namespaces)
    TWO_NODE_ARGS,
    run_8p_on_two_nodes,
    two_namespaces_fixture,
)


class FakeAccelerator:
    """A stand-in accelerator kind with a fixed number of visible devices."""

    is_accelerator = True
    name = "npu"
    visible_devices_env = "ASCEND_RT_VISIBLE_DEVICES"

    def __init__(self, count):
        self.count = count

    def device_count(self):
        return self.count


EIGHT = FakeAccelerator(8)


def resolve(environ, kind=EIGHT, **options):
    """The context a trainer's command line (`options` as its flags) gets in `environ`."""
    return resolve_launch(LaunchOptions(cli=True, **options), environ=environ, kind=kind)


def who(ctx):
    return (
        ctx.mode,
        ctx.rank,
        ctx.local_rank,
        ctx.world_size,
        ctx.local_world_size,
        ctx.node_rank,
        ctx.nnodes,
        ctx.device_index,
    )


def test_a_kind_without_a_visible_devices_variable_bounds_the_device_index():
    # A user's own kind may have no visible-devices variable: the error named it and, for
    # None, raised TypeError from os.environ instead of this line.
    class NoVariable(FakeAccelerator):
        name = "mtia"
        visible_devices_env = None

    with pytest.raises(
        UsageError,
        match=r"^--gpu 3 but only 2 mtia device\(s\) are visible: use an index below 2$",
    ):
        resolve({}, kind=NoVariable(2), gpu=3)


# -- the registry --------------------------------------------------------------------------------


def test_detection_order_is_the_stated_one():
    assert [env.NAME for env in ENVIRONMENTS] == [
        "deepspeed",
        "launch",
        "torchrun",
        "pytorchjob",
        "env",
        "rank_table",
        "ascend",
        "mpi",
        "mpich",
        "slurm",
        "spawn",
        "cli",
        "single",
    ]
    assert list(VARIABLES) == [env.NAME for env in ENVIRONMENTS]
    assert {
        "SLURM_STEP_NODELIST",
        "CROSS_SIZE",
        "RANK_TABLE_FILE",
        "PMI_RANK",
        "KUBERNETES_SERVICE_HOST",
        "TORCHELASTIC_RUN_ID",
    } <= set(ALL_VARIABLES)


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"WORLD_SIZE": "abc"},
        {"SLURM_NTASKS": "x", "SLURM_PROCID": "0"},
        {"RANK_TABLE_FILE": "/nonexistent.json", "RANK_ID": "0"},
        {"OMPI_COMM_WORLD_SIZE": ""},
        {"PMI_SIZE": "4", "MPI_LOCALRANKID": "oops"},
        {"KUBERNETES_PORT": "tcp://x", "RANK": "-"},
    ],
)
def test_detection_reads_only_and_never_raises(environ):
    assert environments.detect(environ=environ) in ENVIRONMENTS


# -- torchrun, torch.distributed.launch, a shell loop: 2 nodes x 8 ---------------------------------

TORCHRUN_2X8 = {
    "RANK": "11",
    "LOCAL_RANK": "3",
    "WORLD_SIZE": "16",
    "LOCAL_WORLD_SIZE": "8",
    "GROUP_RANK": "1",
    "GROUP_WORLD_SIZE": "2",
    "ROLE_RANK": "11",
    "ROLE_WORLD_SIZE": "16",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29400",
    "TORCHELASTIC_RESTART_COUNT": "0",
    "TORCHELASTIC_MAX_RESTARTS": "0",
    "TORCHELASTIC_RUN_ID": "job7",
}


def test_torchrun_two_nodes_joins_the_agents_store():
    ctx = resolve(TORCHRUN_2X8)
    assert who(ctx) == ("torchrun", 11, 3, 16, 8, 1, 2, 3)
    assert ctx.launcher_store and ctx.init_method == "env://"


def test_torch_distributed_launch_is_told_apart_by_its_argument():
    ctx = resolve(TORCHRUN_2X8, local_rank=3)
    assert who(ctx) == ("launch", 11, 3, 16, 8, 1, 2, 3) and ctx.launcher_store


def test_a_shell_loop_meets_in_devicekits_rendezvous():
    loop = {
        name: TORCHRUN_2X8[name]
        for name in (
            "RANK",
            "LOCAL_RANK",
            "WORLD_SIZE",
            "LOCAL_WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
        )
    }
    ctx = resolve(dict(loop, NODE_RANK="1"))
    assert who(ctx) == ("env", 11, 3, 16, 8, 1, 2, 3)
    assert not ctx.launcher_store and ctx.init_method == "tcp://10.0.0.1:29400"


@pytest.mark.parametrize(
    "environ, named",
    [
        ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc' is not an integer"),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "x"}, "LOCAL_RANK='x' is not an integer"),
        ({"LOCAL_RANK": "0", "MASTER_PORT": "70000"}, "MASTER_PORT=70000 is not a TCP port"),
        ({"RANK": "1", "GROUP_RANK": "one"}, "GROUP_RANK='one' is not an integer"),
        (
            {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "zero"},
            "SLURM_LOCALID='zero' is not an integer",
        ),
        ({"RANK_ID": "x", "RANK_SIZE": "8"}, "RANK_ID='x' is not an integer"),
        (
            {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "-1"},
            "OMPI_COMM_WORLD_LOCAL_SIZE=-1 must be at least 1",
        ),
    ],
)
def test_a_malformed_variable_is_named_before_a_missing_one(environ, named):
    with pytest.raises(UsageError, match="^" + re.escape(named)):
        resolve(environ)


# -- DeepSpeed ----------------------------------------------------------------------------------

# deepspeed/launcher/launch.py: per process RANK and LOCAL_RANK; per node WORLD_SIZE,
# CROSS_RANK, CROSS_SIZE, LOCAL_SIZE, MASTER_ADDR, MASTER_PORT; and --local_rank=N appended.
DEEPSPEED_2X8 = {
    "RANK": "11",
    "LOCAL_RANK": "3",
    "WORLD_SIZE": "16",
    "LOCAL_SIZE": "8",
    "CROSS_RANK": "1",
    "CROSS_SIZE": "2",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
    "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
}


def test_deepspeed_two_nodes_of_eight_is_not_one_node_of_sixteen():
    ctx = resolve(DEEPSPEED_2X8, local_rank=3)  # the --local_rank=3 DeepSpeed appends
    assert who(ctx) == ("deepspeed", 11, 3, 16, 8, 1, 2, 3)
    assert not ctx.launcher_store and ctx.init_method == "tcp://10.0.0.1:29500"
    assert launcher_of(DEEPSPEED_2X8) == "deepspeed"


def test_deepspeed_hostfile_with_unequal_slots():
    # worker-0 slots=8, worker-1 slots=4: 12 ranks, node 1 runs 4.
    environ = dict(DEEPSPEED_2X8, RANK="9", LOCAL_RANK="1", WORLD_SIZE="12", LOCAL_SIZE="4")
    assert who(resolve(environ)) == ("deepspeed", 9, 1, 12, 4, 1, 2, 1)


@pytest.mark.parametrize(
    "change, says",
    [
        (
            {"CROSS_RANK": None},
            "CROSS_RANK is not set: DeepSpeed's launcher exports RANK, "
            "WORLD_SIZE, LOCAL_RANK, LOCAL_SIZE, CROSS_RANK",
        ),
        ({"CROSS_RANK": "2"}, "CROSS_RANK=2 is not below CROSS_SIZE=2"),
        ({"LOCAL_RANK": "8"}, "LOCAL_RANK=8 is not below LOCAL_SIZE=8"),
        ({"MASTER_ADDR": None}, "MASTER_ADDR is not set: DeepSpeed's launcher exports"),
    ],
)
def test_deepspeed_mistakes(change, says):
    environ = {k: v for k, v in dict(DEEPSPEED_2X8, **change).items() if v is not None}
    with pytest.raises(UsageError, match="^" + re.escape(says)):
        resolve(environ)


def test_deepspeed_local_rank_argument_must_agree():
    with pytest.raises(UsageError, match=r"^--local-rank 2 contradicts LOCAL_RANK=3"):
        resolve(DEEPSPEED_2X8, local_rank=2)


# -- Kubeflow PyTorchJob without torchrun --------------------------------------------------------

# What the training operator gives a worker pod (pkg/controller.v1/pytorch/envvar.go):
# MASTER_ADDR/MASTER_PORT, WORLD_SIZE (all replicas), RANK (master 0, worker i -> i + 1),
# PYTHONUNBUFFERED; Kubernetes adds KUBERNETES_SERVICE_HOST/PORT to every pod.
PYTORCHJOB_WORKER = {
    "MASTER_ADDR": "mnist-master-0",
    "MASTER_PORT": "23456",
    "WORLD_SIZE": "4",
    "RANK": "2",
    "PYTHONUNBUFFERED": "0",
    "KUBERNETES_SERVICE_HOST": "10.96.0.1",
    "KUBERNETES_SERVICE_PORT": "443",
    "KUBERNETES_PORT": "tcp://10.96.0.1:443",
}


def test_pytorchjob_one_process_per_pod():
    ctx = resolve(PYTORCHJOB_WORKER)
    assert who(ctx) == ("pytorchjob", 2, 0, 4, 1, 2, 4, 0)
    assert (ctx.master_addr, ctx.master_port, ctx.launcher_store) == (
        "mnist-master-0",
        23456,
        False,
    )


def test_pytorchjob_that_expects_torchrun_says_so():
    with pytest.raises(UsageError, match=r"^PET_NPROC_PER_NODE=4: .*torchrun"):
        resolve(dict(PYTORCHJOB_WORKER, PET_NPROC_PER_NODE="4"))


def test_pytorchjob_running_torchrun_is_torchrun():
    environ = dict(PYTORCHJOB_WORKER, **TORCHRUN_2X8)
    assert resolve(environ).mode == "torchrun"


def test_outside_kubernetes_a_missing_local_rank_is_still_named():
    environ = {k: v for k, v in PYTORCHJOB_WORKER.items() if not k.startswith("KUBERNETES")}
    with pytest.raises(UsageError, match=r"^LOCAL_RANK is not set"):
        resolve(environ)


# -- Ascend rank table --------------------------------------------------------------------------


def rank_table(servers=2, devices=8, **top):
    """A rank table as CANN documents it (version 1.0): every value a string."""
    table = {
        "status": "completed",
        "version": "1.0",
        "server_count": str(servers),
        "server_list": [
            {
                "server_id": f"10.0.0.{s + 1}",
                "device": [
                    {
                        "device_id": str(d),
                        "device_ip": f"192.168.{s}.{d + 8}",
                        "rank_id": str(s * devices + d),
                    }
                    for d in range(devices)
                ],
            }
            for s in range(servers)
        ],
    }
    table.update(top)
    return table


@pytest.fixture
def table_file(tmp_path):
    def write(table):
        path = tmp_path / "rank_table.json"
        path.write_text(table if isinstance(table, str) else json.dumps(table))
        return str(path)

    return write


def test_rank_table_two_servers_of_eight(table_file):
    environ = {"RANK_TABLE_FILE": table_file(rank_table()), "RANK_ID": "11", "RANK_SIZE": "16"}
    # The 8p script's flags: --gpu picks the device; the table decides everything else.
    ctx = resolve(environ, gpu=3, rank=0, world_size=1, multiprocessing_distributed=True)
    assert who(ctx) == ("rank_table", 11, 3, 16, 8, 1, 2, 3)
    ctx = resolve(environ)
    assert who(ctx) == ("rank_table", 11, 3, 16, 8, 1, 2, 3)
    assert (ctx.master_addr, ctx.master_port) == ("10.0.0.1", 29500)
    assert launcher_of(environ) == "rank_table"


def test_rank_table_version_1_2_reaches_node_0_at_its_host_ip(table_file):
    table = rank_table()
    for server in table["server_list"]:
        server["host_ip"] = server["server_id"].replace("10.0.0", "172.16.0")
        server["server_id"] = "superpod-node"
    environ = {"RANK_TABLE_FILE": table_file(table), "RANK_ID": "3"}
    assert resolve(environ).master_addr == "172.16.0.1"
    assert resolve(dict(environ, MASTER_ADDR="10.9.9.9")).master_addr == "10.9.9.9"


def test_rank_table_device_ids_follow_the_visible_devices(table_file):
    table = rank_table(servers=1, devices=4)
    for number, device in enumerate(table["server_list"][0]["device"]):
        device["device_id"] = str(number + 4)
    environ = {"RANK_TABLE_FILE": table_file(table), "RANK_ID": "2"}
    assert resolve(dict(environ, ASCEND_RT_VISIBLE_DEVICES="4,5,6,7")).device_index == 2
    assert resolve(environ).device_index == 6
    with pytest.raises(
        UsageError, match="device_id 6, which ASCEND_RT_VISIBLE_DEVICES='4,5' hides"
    ):
        resolve(dict(environ, ASCEND_RT_VISIBLE_DEVICES="4,5"))


def _duplicate_rank(table):
    table["server_list"][1]["device"][0]["rank_id"] = "3"
    return table


def _number_rank(table):
    table["server_list"][0]["device"][1]["rank_id"] = 1
    return table


def _no_device_ip(table):
    del table["server_list"][1]["device"][2]["device_ip"]
    return table


@pytest.mark.parametrize(
    "table, says",
    [
        (
            rank_table(),
            r"lists 16 devices but RANK_SIZE=8: under a rank table RANK_SIZE is the "
            r"number of ranks of all servers",
        ),
        ('{"server_count": "2",', r"is not valid JSON at line 1"),
        (rank_table(server_count="3"), r"server_count is \"3\" but server_list has 2 server\(s\)"),
        (
            _duplicate_rank(rank_table()),
            r"rank_id \"3\" is listed twice \(server_list\[0\]\.device"
            r"\[3\] and server_list\[1\]\.device\[0\]\)",
        ),
        (
            _number_rank(rank_table()),
            r"server_list\[0\]\.device\[1\]\.rank_id is 1, a number: the "
            r"rank table holds strings, write \"1\"",
        ),
        (_no_device_ip(rank_table()), r"server_list\[1\]\.device\[2\]\.device_ip is missing"),
        (
            rank_table(status="initializing"),
            r"has status 'initializing': a rank table is usable "
            r"once its status is \"completed\"",
        ),
        ([1, 2], r"holds list, not a JSON object"),
    ],
)
def test_a_bad_rank_table_is_one_line(table_file, table, says):
    path = table_file(table)
    with pytest.raises(
        UsageError, match=r"^RANK_TABLE_FILE='.*rank_table\.json'.*" + says
    ) as raised:
        resolve({"RANK_TABLE_FILE": path, "RANK_ID": "0", "RANK_SIZE": "8"})
    assert "\n" not in str(raised.value)


def test_rank_table_missing_file_and_foreign_rank(table_file):
    with pytest.raises(
        UsageError,
        match=r"^RANK_TABLE_FILE='/no/such.json' cannot be read "
        r"\(No such file or directory\)",
    ):
        resolve({"RANK_TABLE_FILE": "/no/such.json", "RANK_ID": "0"})
    with pytest.raises(
        UsageError,
        match=r"^RANK_ID=16 is not a rank_id of RANK_TABLE_FILE="
        r".*: its ranks run from 0 to 15",
    ):
        resolve({"RANK_TABLE_FILE": table_file(rank_table()), "RANK_ID": "16"})


# -- Open MPI, MPICH / Intel MPI ---------------------------------------------------------------

OPEN_MPI_2X8 = {
    "OMPI_COMM_WORLD_RANK": "11",
    "OMPI_COMM_WORLD_SIZE": "16",
    "OMPI_COMM_WORLD_LOCAL_RANK": "3",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "8",
    "OMPI_COMM_WORLD_NODE_RANK": "3",
    "OMPI_UNIVERSE_SIZE": "16",
}
MPICH_2X8 = {
    "PMI_RANK": "11",
    "PMI_SIZE": "16",
    "MPI_LOCALRANKID": "3",
    "MPI_LOCALNRANKS": "8",
    "PMI_FD": "6",
}


@pytest.mark.parametrize(
    "environ, says",
    [
        (
            OPEN_MPI_2X8,
            "mpirun started 8 ranks on this node (OMPI_COMM_WORLD_LOCAL_SIZE=8) but only 4 npu "
            "device(s) are visible (ASCEND_RT_VISIBLE_DEVICES unset): start one rank per "
            "device, at most 4 per node (mpirun -np 4, or -N 4 on several nodes)",
        ),
        (
            MPICH_2X8,
            "mpiexec started 8 ranks on this node (MPI_LOCALNRANKS=8) but only 4 npu device(s) "
            "are visible (ASCEND_RT_VISIBLE_DEVICES unset): start one rank per device, at most "
            "4 per node (mpiexec -n 4, or -ppn 4 on several nodes)",
        ),
    ],
)
def test_more_mpi_ranks_on_a_node_than_devices_are_refused_by_every_rank(environ, says):
    # Local rank 3 has a device of its own and still refuses: MPICH would leave it waiting
    # for the ranks that cannot run.
    with pytest.raises(UsageError) as refused:
        resolve(environ, kind=FakeAccelerator(4))
    assert str(refused.value) == says


@pytest.mark.parametrize("environ, mode", [(OPEN_MPI_2X8, "mpi"), (MPICH_2X8, "mpich")])
def test_mpi_two_nodes(environ, mode):
    with pytest.raises(UsageError, match="2-node run needs the address of node 0: set MASTER_ADDR"):
        resolve(environ)
    ctx = resolve(dict(environ, MASTER_ADDR="10.0.0.1"))
    assert who(ctx) == (mode, 11, 3, 16, 8, 1, 2, 3)
    assert (ctx.master_addr, ctx.master_port, ctx.launcher_store) == ("10.0.0.1", 29500, False)


# mpirun inside a Slurm job starts its daemons with srun: each rank inherits its daemon's
# SLURM_PROCID (the node's index) and SLURM_NTASKS (the node count).
SLURM_DAEMON = {
    "SLURM_PROCID": "1",
    "SLURM_NTASKS": "2",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "1",
    "SLURM_JOB_ID": "81",
    "SLURM_STEP_ID": "0",
    "SLURM_JOB_NODELIST": "n[1-2]",
}


@pytest.mark.parametrize("environ, mode", [(OPEN_MPI_2X8, "mpi"), (MPICH_2X8, "mpich")])
def test_mpirun_inside_a_slurm_job_is_mpi(environ, mode):
    ctx = resolve(dict(environ, MASTER_ADDR="n1", **SLURM_DAEMON))
    assert (ctx.mode, ctx.rank) == (mode, 11)


def test_srun_with_pmi2_is_slurm():
    environ = dict(SLURM_DAEMON, PMI_RANK="1", PMI_SIZE="2", SLURM_STEP_TASKS_PER_NODE="1(x2)")
    assert resolve(environ).mode == "slurm"


# -- Slurm ---------------------------------------------------------------------------------------

# What srun gives task 11 of `srun -N 2 --ntasks-per-node 8` in job 4242137 (the step's own
# layout and node list first, the job's after them).
SLURM_2X8 = {
    "SLURM_PROCID": "11",
    "SLURM_LOCALID": "3",
    "SLURM_NODEID": "1",
    "SLURM_NTASKS": "16",
    "SLURM_NPROCS": "16",
    "SLURM_NNODES": "2",
    "SLURM_STEP_TASKS_PER_NODE": "8(x2)",
    "SLURM_TASKS_PER_NODE": "8(x2)",
    "SLURM_NTASKS_PER_NODE": "8",
    "SLURM_STEP_NODELIST": "gpu-a[07-08]",
    "SLURM_JOB_NODELIST": "gpu-a[07-08],gpu-b2",
    "SLURM_STEP_ID": "0",
    "SLURM_JOB_ID": "4242137",
    "SLURMD_NODENAME": "gpu-a08",
}


def test_slurm_two_nodes_without_master_addr():
    ctx = resolve(SLURM_2X8)
    assert who(ctx) == ("slurm", 11, 3, 16, 8, 1, 2, 3)
    # node 0 is the step's first host; the port is 15000 + the job id's last four digits
    assert (ctx.master_addr, ctx.master_port) == ("gpu-a07", 17137)
    assert not ctx.launcher_store


def test_the_reference_multi_node_idiom_under_srun_is_refused_with_the_way_that_works():
    # srun --ntasks-per-node=1 -N 2 python main.py --multiprocessing-distributed ...: the
    # tasks are the ranks, so it would have trained one process per node without a word
    one_task_per_node = dict(
        SLURM_2X8,
        SLURM_PROCID="1",
        SLURM_NTASKS="2",
        SLURM_LOCALID="0",
        SLURM_NODEID="1",
        SLURM_STEP_TASKS_PER_NODE="1(x2)",
        SLURM_TASKS_PER_NODE="1(x2)",
        SLURM_NTASKS_PER_NODE="1",
    )
    with pytest.raises(UsageError) as refused:
        resolve(one_task_per_node, multiprocessing_distributed=True, world_size=2, rank=1)
    assert str(refused.value) == (
        "--multiprocessing-distributed was given but Slurm started this process as task 1 of "
        "2 (SLURM_PROCID, SLURM_NTASKS): drop --multiprocessing-distributed, and start one "
        "task per device (srun --ntasks-per-node=DEVICES), or run torchrun or "
        "launch/run_8p.sh in one task per node"
    )
    assert resolve(one_task_per_node).world_size == 2  # without the flag: a run of 2 tasks


def test_more_srun_tasks_on_a_node_than_devices_are_refused_by_every_task():
    # srun --gpus-per-task=1 (each task sees one device) or too many tasks: task 0, which has
    # a device, refuses too, instead of waiting for the tasks that cannot run.
    with pytest.raises(UsageError) as refused:
        resolve(dict(SLURM_2X8, SLURM_PROCID="8", SLURM_LOCALID="0"), kind=FakeAccelerator(1))
    assert str(refused.value) == (
        "srun started 8 tasks on this node (SLURM_STEP_TASKS_PER_NODE='8(x2)') but only 1 "
        "npu device(s) are visible (ASCEND_RT_VISIBLE_DEVICES unset): start one task per "
        "device, at most 1 per node (srun --ntasks-per-node=1), each task seeing all of the "
        "node's devices"
    )


# What sbatch's batch script of `sbatch -N 2 --ntasks-per-node 8` sees: task 0's numbers,
# but no step (real Slurm 22.05, tests/test_slurm.py runs it).
SLURM_BATCH_SCRIPT = {
    key: value for key, value in SLURM_2X8.items() if not key.startswith("SLURM_STEP")
} | {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}


def test_python_in_sbatchs_batch_script_is_refused_at_once_instead_of_waiting_for_peers():
    with pytest.raises(UsageError) as refused:
        resolve(SLURM_BATCH_SCRIPT)
    assert str(refused.value) == (
        "this is sbatch's batch script, not one of srun's tasks (SLURM_NTASKS=16 but no "
        "SLURM_STEP_ID): start the ranks with srun (srun python SCRIPT), or run "
        "launch/run_8p.sh in one task per node"
    )
    # run_8p.sh (or torchrun) in the batch script: its own variables win, as they must
    ctx = resolve(
        dict(SLURM_BATCH_SCRIPT, RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
        | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    )
    assert (ctx.mode, ctx.rank) == ("env", 1)


@pytest.mark.parametrize(
    "environ, variable",
    [
        (SLURM_2X8, "SLURM_RESTART_COUNT"),
        (TORCHRUN_2X8, "TORCHELASTIC_RESTART_COUNT"),
    ],
)
def test_a_restarted_run_says_which_restart_it_is(environ, variable):
    assert resolve(environ).restarts == 0
    assert ", restart" not in resolve(environ).describe()
    ctx = resolve(dict(environ, **{variable: "2"}))
    assert ctx.restarts == 2
    assert ctx.describe().endswith(", restart 2")
    with pytest.raises(UsageError, match=f"^{variable}='x' is not an integer"):
        resolve(dict(environ, **{variable: "x"}))


def test_slurm_master_variables_win():
    ctx = resolve(dict(SLURM_2X8, MASTER_ADDR="10.1.1.1", MASTER_PORT="23456"))
    assert (ctx.master_addr, ctx.master_port) == ("10.1.1.1", 23456)
    ctx = resolve(SLURM_2X8, addr="10.2.2.2", port=1234)
    assert (ctx.master_addr, ctx.master_port) == ("10.2.2.2", 1234)


def test_slurm_job_node_list_when_the_step_has_none():
    environ = {k: v for k, v in SLURM_2X8.items() if k != "SLURM_STEP_NODELIST"}
    assert resolve(environ).master_addr == "gpu-a07"


def test_slurm_one_node_uses_loopback():
    environ = dict(
        SLURM_2X8,
        SLURM_PROCID="3",
        SLURM_NODEID="0",
        SLURM_NTASKS="8",
        SLURM_STEP_TASKS_PER_NODE="8",
    )
    ctx = resolve(environ)
    assert (ctx.nnodes, ctx.master_addr, ctx.master_port) == (1, "127.0.0.1", 17137)


@pytest.mark.parametrize(
    "node_list, first",
    [
        ("node[01-04,07],gpu-b2", "node01"),
        ("gpu[008-010]", "gpu008"),
        ("n7", "n7"),
        ("rack[2-3]-n[09-10]", "rack2-n09"),
        ("10.1.2.[3-4]", "10.1.2.3"),
        ("a[7,1-2],b", "a7"),
        ("login.cluster.org,n1", "login.cluster.org"),
    ],
)
def test_slurm_node_list_forms(node_list, first):
    assert resolve(dict(SLURM_2X8, SLURM_STEP_NODELIST=node_list)).master_addr == first


@pytest.mark.parametrize(
    "node_list, reason",
    [
        ("node[01-04", "a '[' without ']'"),
        ("node01]", "a ']' without '['"),
        ("node[0[1-2]]", "a '[' inside brackets"),
        ("node[04-01]", "the range 04-01 runs backwards"),
        ("node[a-b]", "[a-b] holds 'a-b', not a number"),
        ("node[1,,2]", "[1,,2] holds ''"),
        ("n1,,n2", "an empty host name"),
        ("node 1", "'node 1' is not a host name"),
        ("4(x2)", "'4(x2)' is not a host name"),
    ],
)
def test_a_node_list_that_does_not_parse_is_one_line(node_list, reason):
    with pytest.raises(UsageError) as raised:
        resolve(dict(SLURM_2X8, SLURM_STEP_NODELIST=node_list))
    assert str(raised.value).startswith(
        f"SLURM_STEP_NODELIST={node_list!r} is not a Slurm node list ({reason}"
    )
    assert "node[01-04,07],gpu-b2" in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "layout, procid, nodeid, localid, expected",
    [
        ("4", "5", "1", "1", (5, 1, 8, 4, 1, 2)),
        ("4(x2)", "5", "1", "1", (5, 1, 8, 4, 1, 2)),
        ("4(x2),3", "9", "2", "1", (9, 1, 11, 3, 2, 3)),  # the third node runs 3 tasks
    ],
)
def test_slurm_tasks_per_node_forms(layout, procid, nodeid, localid, expected):
    ntasks = str(sum(int(n) * int(x or 1) for n, x in re.findall(r"(\d+)(?:\(x(\d+)\))?", layout)))
    if layout == "4":
        ntasks = "8"  # one count: every node runs it
    environ = {
        "SLURM_PROCID": procid,
        "SLURM_LOCALID": localid,
        "SLURM_NODEID": nodeid,
        "SLURM_NTASKS": ntasks,
        "SLURM_NTASKS_PER_NODE": layout,
        "SLURM_JOB_NODELIST": "n[1-3]",
    }
    ctx = resolve(environ)
    assert (
        ctx.rank,
        ctx.local_rank,
        ctx.world_size,
        ctx.local_world_size,
        ctx.node_rank,
        ctx.nnodes,
    ) == expected


@pytest.mark.parametrize(
    "change, says",
    [
        (
            {"SLURM_STEP_TASKS_PER_NODE": "8(x2"},
            "SLURM_STEP_TASKS_PER_NODE='8(x2' is not Slurm's tasks-per-node form (e.g. 4, 4(x2) or "
            "4(x2),3)",
        ),
        (
            {"SLURM_STEP_TASKS_PER_NODE": "8,7"},
            "SLURM_STEP_TASKS_PER_NODE='8,7' adds up to 15 tasks but SLURM_NTASKS=16",
        ),
        (
            {"SLURM_STEP_TASKS_PER_NODE": "5"},
            "SLURM_NTASKS=16 is not a multiple of SLURM_STEP_TASKS_PER_NODE=5",
        ),
        (
            {"SLURM_NODEID": "2"},
            "SLURM_NODEID=2 is not below the 2 node(s) that "
            "SLURM_STEP_TASKS_PER_NODE='8(x2)' describes",
        ),
        ({"SLURM_PROCID": "16"}, "SLURM_PROCID=16 is not below SLURM_NTASKS=16"),
        ({"SLURM_JOB_ID": "job"}, "SLURM_JOB_ID='job' is not an integer"),
    ],
)
def test_slurm_mistakes(change, says):
    with pytest.raises(UsageError, match="^" + re.escape(says)):
        resolve(dict(SLURM_2X8, **change))


# -- which launcher, as doctor and launch() ask ------------------------------------------------


@pytest.mark.parametrize(
    "environ, name",
    [
        (TORCHRUN_2X8, "torchrun"),
        (DEEPSPEED_2X8, "deepspeed"),
        (PYTORCHJOB_WORKER, "pytorchjob"),
        ({"RANK": "0"}, "env"),
        ({"RANK_ID": "0", "RANK_SIZE": "8"}, "ascend"),
        ({"RANK_ID": "0", "RANK_TABLE_FILE": "t.json"}, "rank_table"),
        (OPEN_MPI_2X8, "mpi"),
        (MPICH_2X8, "mpich"),
        (SLURM_2X8, "slurm"),
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, None),
        ({}, None),
    ],
)
def test_launcher_of(environ, name):
    assert launcher_of(environ) == name


# -- doctor ------------------------------------------------------------------------------------


def test_doctor_names_the_environment_and_the_variables_it_read(monkeypatch):
    for name, value in SLURM_2X8.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "64")  # Slurm's, but not read by devicekit
    info = doctor.gather("cpu")
    assert info["launcher"] == "slurm"
    assert info["launch_environment"]["SLURM_STEP_NODELIST"] == "gpu-a[07-08]"
    assert "SLURM_CPUS_ON_NODE" not in info["launch_environment"]
    assert info["launch_context"].startswith(
        "slurm: rank 11/16, local rank 3/8, node 1/2, master gpu-a07:17137"
    )
    report = doctor.format_report(info)
    assert "launcher     slurm, from SLURM_PROCID=11, SLURM_NTASKS=16, SLURM_LOCALID=3" in report


@pytest.mark.parametrize(
    "environ",
    [
        {"WORLD_SIZE": "abc"},
        {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"},
        dict(SLURM_2X8, SLURM_STEP_NODELIST="node[01-"),
        dict(DEEPSPEED_2X8, CROSS_SIZE="x"),
        {"RANK_TABLE_FILE": "/no/such.json", "RANK_ID": "0"},
        {"PMI_SIZE": "4", "PMI_RANK": "0", "MPI_LOCALRANKID": "-1"},
        {"ASCEND_RT_VISIBLE_DEVICES": "1,0", "ZE_AFFINITY_MASK": "0,a"},
    ],
)
def test_doctor_reports_a_bad_variable_instead_of_failing(monkeypatch, environ):
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    info = doctor.gather()
    assert info["problems"], info
    assert json.loads(json.dumps(info)) == info
    assert "PROBLEM" in doctor.format_report(info)


def test_doctor_finds_cann_without_importing_torch_npu(monkeypatch, tmp_path):
    import platform

    toolkit = tmp_path / "Ascend" / "ascend-toolkit" / "latest"
    info_file = toolkit / f"{platform.machine()}-linux" / "ascend_toolkit_install.info"
    info_file.parent.mkdir(parents=True)
    info_file.write_text(
        "package_name=Ascend-cann-toolkit\nversion=8.5.0\ninnerversion=V100R001C25\narch=x86_64\n"
    )
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(toolkit))
    info = doctor.gather("cpu")
    assert info["cann_install"] == {
        "version": "8.5.0",
        "path": str(toolkit),
        "found_by": "ASCEND_TOOLKIT_HOME",
    }
    assert (
        f"CANN         8.5.0 at {toolkit} (found by ASCEND_TOOLKIT_HOME)"
        in doctor.format_report(info)
    )
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME")
    monkeypatch.setattr("devicekit.kinds.npu.CANN_INSTALL_INFO", str(tmp_path / "cann.info"))
    (tmp_path / "cann.info").write_text(f"Install_Path={tmp_path / 'Ascend'}\n")
    assert doctor.gather("cpu")["cann_install"]["found_by"] == str(tmp_path / "cann.info")


def test_doctor_warns_about_a_small_dev_shm_and_a_mismatched_torch_npu(monkeypatch):
    monkeypatch.setattr(doctor, "_shm_bytes", lambda: 64 << 20)
    monkeypatch.setattr(doctor, "torch_npu_version", lambda: "2.12.0")
    monkeypatch.setattr(doctor, "fork_can_deadlock", lambda: False)
    info = doctor.gather("cpu")
    assert info["problems"] == []  # warnings do not block running
    shm, npu = sorted(info["warnings"], key=lambda text: not text.startswith("/dev/shm"))
    assert shm.startswith('/dev/shm is 64 MiB: DataLoader workers die with "bus error"')
    assert "--shm-size" in shm
    assert info["torch_npu"]["matches_torch"] is False
    assert npu.startswith("torch_npu 2.12.0 does not match torch 2.13")
    assert "pip install torch-npu==2.13" in npu
    assert "WARNING      /dev/shm is 64 MiB" in doctor.format_report(info)


# -- two nodes in network namespaces, started the Slurm way ---------------------------------------


def _weights(text):
    """{rank: weights hash} from the `=> rank R/W done: weights H` lines of a log."""
    return {
        int(rank): digest
        for rank, digest in re.findall(r"^=> rank (\d+)/4 done: weights ([0-9a-f]+)$", text, re.M)
    }


@pytest.mark.slow
@pytest.mark.two_node
@time_limit(480)
def test_two_nodes_started_the_slurm_way_match_run_8p(two_namespaces, tmp_path):
    ns = two_namespaces
    subnet = ns["addresses"][0].rsplit(".", 1)[0]
    with Tracked(tmp_path, "slurm") as run:
        for rank in range(4):
            node, local = divmod(rank, 2)
            # What srun exports to task `rank` of `srun -N 2 --ntasks-per-node 2`: no
            # MASTER_ADDR, no MASTER_PORT.
            env = run.env(
                SLURM_PROCID=rank,
                SLURM_LOCALID=local,
                SLURM_NODEID=node,
                SLURM_NTASKS=4,
                SLURM_NPROCS=4,
                SLURM_NNODES=2,
                SLURM_STEP_TASKS_PER_NODE="2(x2)",
                SLURM_TASKS_PER_NODE="2(x2)",
                SLURM_STEP_NODELIST=f"{subnet}.[1-2]",
                SLURM_JOB_NODELIST=f"{subnet}.[1-2]",
                SLURM_JOB_ID=31337,
                SLURM_STEP_ID=0,
            )
            run.start(
                f"task{rank}",
                [
                    "ip",
                    "netns",
                    "exec",
                    ns["names"][node],
                    PY,
                    "main.py",
                    *TWO_NODE_ARGS,
                    "--output-dir",
                    tmp_path / f"slurm{node}",
                ],
                env,
            )
        slurm = [run.wait(f"task{rank}", 240)[0] for rank in range(4)]
        run.wait_all_gone(GONE_BOUND_S)
    everything = "\n".join(map(str, slurm))
    assert [result.returncode for result in slurm] == [0, 0, 0, 0], everything
    # node 0 is the node list's first host; the port 15000 + the job id's last four digits
    assert (
        f"(slurm: rank 0/4, local rank 0/2, node 0/2, master {subnet}.1:16337)" in slurm[0].stdout
    ), everything
    slurm_weights = {}
    for result in slurm:
        slurm_weights.update(_weights(result.stdout))
    assert sorted(slurm_weights) == [0, 1, 2, 3], everything
    assert (tmp_path / "slurm0" / "checkpoint.pth.tar").is_file()
    assert not (tmp_path / "slurm1").exists(), "only global rank 0 writes"

    with Tracked(tmp_path, "run_8p") as run:
        shell = run_8p_on_two_nodes(run, ns, TWO_NODE_ARGS, tmp_path, log_dir="logs", timeout=240)
    assert [result.returncode for result in shell] == [0, 0], "\n".join(map(str, shell))
    shell_weights = {}
    for node in (0, 1):
        for local in (0, 1):
            shell_weights.update(
                _weights((tmp_path / f"logs{node}" / f"rank_{local}.log").read_text())
            )
    assert sorted(shell_weights) == [0, 1, 2, 3]
    assert len(set(slurm_weights.values())) == 1, slurm_weights
    assert slurm_weights == shell_weights


# -- the worked example of docs/extending.md: a launch environment of one's own -----------------

FLUX_2X8 = {
    "FLUX_TASK_RANK": "11",
    "FLUX_TASK_LOCAL_ID": "3",
    "FLUX_JOB_SIZE": "16",
    "FLUX_JOB_NNODES": "2",
    "FLUX_JOB_ID": "1234567890",
    "MASTER_ADDR": "10.0.0.1",
}


@pytest.fixture
def flux(monkeypatch):
    """docs/extending/launch_environment.py, in ENVIRONMENTS just before slurm (its line)."""
    path = REPO / "docs" / "extending" / "launch_environment.py"
    spec = importlib.util.spec_from_file_location("launch_environment_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    at = [env.NAME for env in ENVIRONMENTS].index("slurm")
    monkeypatch.setattr(
        environments, "ENVIRONMENTS", (*ENVIRONMENTS[:at], module, *ENVIRONMENTS[at:])
    )
    return module


def test_the_worked_example_of_a_launch_environment(flux):
    assert (flux.NAME, type(flux.VARIABLES)) == ("flux", tuple)
    assert callable(flux.detect) and callable(flux.context)
    assert not hasattr(flux, "STARTED_BY_LAUNCHER")  # the default: a launcher started it
    assert launcher_of(FLUX_2X8) == "flux"
    ctx = resolve(FLUX_2X8)
    assert who(ctx) == ("flux", 11, 3, 16, 8, 1, 2, 3)
    assert (ctx.init_method, ctx.launcher_store) == ("tcp://10.0.0.1:29500", False)
    # Inside a Slurm job (srun flux start) the broker's SLURM_* variables are inherited.
    inside_slurm = {**FLUX_2X8, "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0"}
    assert who(resolve(inside_slurm)) == who(ctx)
    one_node = {**FLUX_2X8, "FLUX_JOB_NNODES": "1", "MASTER_ADDR": ""}
    assert resolve(one_node, kind=FakeAccelerator(16)).master_addr == "127.0.0.1"
    assert environments.detect(environ={**FLUX_2X8, "FLUX_JOB_SIZE": "x"}).NAME == "single"


@pytest.mark.parametrize(
    "change, kind, says",
    [
        ({"FLUX_TASK_RANK": "16"}, EIGHT, r"^FLUX_TASK_RANK=16 is not below FLUX_JOB_SIZE=16: "),
        ({"FLUX_JOB_NNODES": "3"}, EIGHT, r"^FLUX_JOB_SIZE=16 is not a multiple of FLUX_JOB_NN"),
        ({"FLUX_TASK_LOCAL_ID": "x"}, EIGHT, r"^FLUX_TASK_LOCAL_ID='x' is not an integer"),
        ({"FLUX_TASK_LOCAL_ID": None}, EIGHT, r"^FLUX_TASK_LOCAL_ID is not set: Flux's job sh"),
        ({"MASTER_ADDR": None}, EIGHT, r"^a 2-node run needs the address of node 0: set MAS"),
        ({}, FakeAccelerator(4), r"^flux run started 8 tasks on this node \(FLUX_JOB_SIZE=16 "),
    ],
)
def test_the_worked_example_names_each_mistake(flux, change, kind, says):
    environ = {**FLUX_2X8, **change}
    environ = {name: value for name, value in environ.items() if value is not None}
    with pytest.raises(UsageError, match=says):
        resolve(environ, kind=kind)

"""Every launcher contract in LAUNCH.md becomes the right LaunchContext; every
inconsistency is a UsageError that names the variable or flag."""

import re
import subprocess
import sys

import pytest

from devicekit import kinds
from devicekit.environments import (
    REFERENCE_DIST_URL,
    LaunchContext,
    LaunchOptions,
    launcher_of,
    pop_local_rank,
    resolve_launch,
)
from devicekit.errors import UsageError
from devicekit.rendezvous import explain_setup_error

CPU = kinds.get("cpu")
TORCHRUN = {
    "RANK": "3",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29400",
    "TORCHELASTIC_RUN_ID": "none",
}


class FakeAccelerator:
    """A stand-in accelerator kind with a fixed number of visible devices."""

    is_accelerator = True
    name = "cuda"
    visible_devices_env = "CUDA_VISIBLE_DEVICES"

    def __init__(self, count):
        self.count = count

    def device_count(self):
        return self.count

    def default_ranks_per_node(self):
        return self.count


def resolve(environ=None, kind=CPU, **options):
    """The context for a trainer's command line (`options` as its flags) in `environ`."""
    return resolve_launch(LaunchOptions(cli=True, **options), environ=environ or {}, kind=kind)


def test_torchrun_environment():
    ctx = resolve(TORCHRUN)
    assert (
        ctx.mode,
        ctx.rank,
        ctx.local_rank,
        ctx.world_size,
        ctx.local_world_size,
        ctx.node_rank,
        ctx.nnodes,
    ) == ("torchrun", 3, 1, 4, 2, 1, 2)
    assert ctx.device_index == 1
    assert ctx.init_method == "env://"
    assert ctx.distributed and not ctx.is_main


@pytest.mark.parametrize("spelling", ["--local-rank=1", "--local_rank=1"])
def test_torch_distributed_launch_both_spellings(spelling):
    argv, local_rank = pop_local_rank(["--arch", "resnet18", spelling, "-b", "64"])
    assert argv == ["--arch", "resnet18", "-b", "64"]
    ctx = resolve(TORCHRUN, local_rank=local_rank)
    assert ctx.mode == "launch" and ctx.local_rank == 1


def test_legacy_local_rank_as_separate_value():
    assert pop_local_rank(["--local_rank", "2", "x"]) == (["x"], 2)
    with pytest.raises(UsageError, match="--local-rank needs a value"):
        pop_local_rank(["--local-rank"])


def test_local_rank_flag_without_environment_variable():
    env = dict(TORCHRUN)
    del env["LOCAL_RANK"]
    assert resolve(env, local_rank=1).local_rank == 1


def test_local_rank_flag_contradicting_environment():
    with pytest.raises(UsageError, match="--local-rank 0 contradicts LOCAL_RANK=1"):
        resolve(TORCHRUN, local_rank=0)


def test_shell_loop_environment_is_env_mode():
    env = {
        "RANK": "1",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
    }
    ctx = resolve(env)
    assert (ctx.mode, ctx.rank, ctx.node_rank, ctx.nnodes) == ("env", 1, 0, 1)


@pytest.mark.parametrize("missing", ["RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"])
def test_env_mode_names_the_missing_variable(missing):
    env = dict(TORCHRUN)
    del env[missing]
    with pytest.raises(UsageError, match=f"^{missing} is not set"):
        resolve(env)


def test_rank_not_below_world_size():
    with pytest.raises(UsageError, match="RANK=4 is not below WORLD_SIZE=4"):
        resolve(dict(TORCHRUN, RANK="4"))


def test_malformed_numbers_name_the_variable():
    with pytest.raises(UsageError, match="WORLD_SIZE='two' is not an integer"):
        resolve(dict(TORCHRUN, WORLD_SIZE="two"))
    with pytest.raises(UsageError, match="MASTER_PORT=70000 is not a TCP port"):
        resolve(dict(TORCHRUN, MASTER_PORT="70000"))


def test_local_rank_beyond_visible_devices():
    with pytest.raises(UsageError, match=r"LOCAL_RANK=1 but only 1 cuda device\(s\)"):
        resolve(TORCHRUN, kind=FakeAccelerator(1))
    assert resolve(TORCHRUN, kind=FakeAccelerator(2)).device_index == 1


def test_cpu_has_no_device_limit():
    assert resolve(dict(TORCHRUN, LOCAL_RANK="1"), kind=CPU).local_rank == 1


def test_double_launch_is_refused():
    with pytest.raises(UsageError, match="drop --multiprocessing-distributed"):
        resolve(TORCHRUN, multiprocessing_distributed=True)


def test_gpu_flag_must_agree_with_launcher():
    with pytest.raises(UsageError, match="--gpu 0 contradicts LOCAL_RANK=1"):
        resolve(TORCHRUN, gpu=0)


def test_spawn_single_node_defaults_to_loopback_and_a_free_port():
    ctx = resolve({}, kind=FakeAccelerator(4), multiprocessing_distributed=True)
    assert (ctx.mode, ctx.world_size, ctx.local_world_size, ctx.nnodes) == ("spawn", 4, 4, 1)
    assert ctx.master_addr == "127.0.0.1" and 1024 <= ctx.master_port <= 65535
    child = ctx.for_spawned_rank(3)
    assert (child.rank, child.local_rank, child.device_index) == (3, 3, 3)
    assert child.init_method == f"tcp://127.0.0.1:{ctx.master_port}"


def test_spawn_ignores_the_reference_multicast_default():
    ctx = resolve(
        {},
        multiprocessing_distributed=True,
        nproc_per_node=2,
        dist_url=REFERENCE_DIST_URL,
        world_size=-1,
        rank=-1,
    )
    assert ctx.master_addr == "127.0.0.1" and ctx.world_size == 2


def test_spawn_multi_node_counts_nodes():
    ctx = resolve(
        {},
        kind=FakeAccelerator(8),
        multiprocessing_distributed=True,
        world_size=2,
        rank=1,
        dist_url="tcp://10.1.1.1:23456",
    )
    assert (ctx.world_size, ctx.node_rank, ctx.master_addr, ctx.master_port) == (
        16,
        1,
        "10.1.1.1",
        23456,
    )
    assert ctx.for_spawned_rank(2).rank == 10


def test_spawn_multi_node_needs_an_address():
    with pytest.raises(UsageError, match="2-node run needs the address of node 0"):
        resolve({}, multiprocessing_distributed=True, world_size=2, rank=0)


def test_spawn_more_processes_than_devices():
    with pytest.raises(UsageError, match="--nproc-per-node 3 exceeds the 2 visible"):
        resolve({}, kind=FakeAccelerator(2), multiprocessing_distributed=True, nproc_per_node=3)


def test_spawn_on_cpu_takes_the_count_from_the_flag():
    assert resolve({}, multiprocessing_distributed=True).world_size == CPU.default_ranks_per_node()
    assert resolve({}, multiprocessing_distributed=True, nproc_per_node=3).world_size == 3


def test_spawn_node_rank_not_below_node_count():
    with pytest.raises(UsageError, match=r"--rank 2 .* not below --world-size 2"):
        resolve({}, multiprocessing_distributed=True, world_size=2, rank=2, addr="10.0.0.1")


def test_ascend_idiom_rank_id_and_gpu():
    env = {"RANK_ID": "5", "RANK_SIZE": "8"}
    ctx = resolve(
        env,
        kind=FakeAccelerator(8),
        gpu=5,
        rank=0,
        world_size=1,
        multiprocessing_distributed=True,
        addr="127.0.0.1",
        port=29688,
    )
    assert (ctx.mode, ctx.rank, ctx.local_rank, ctx.world_size, ctx.device_index) == (
        "ascend",
        5,
        5,
        8,
        5,
    )
    assert ctx.init_method == "tcp://127.0.0.1:29688"


def test_ascend_idiom_errors():
    with pytest.raises(UsageError, match="RANK_ID=8 is not below RANK_SIZE=8"):
        resolve({"RANK_ID": "8", "RANK_SIZE": "8"})
    with pytest.raises(UsageError, match="--gpu 8 but only 8 cuda"):
        resolve({"RANK_ID": "0", "RANK_SIZE": "8"}, kind=FakeAccelerator(8), gpu=8)


def test_ascend_idiom_two_nodes():
    ctx = resolve(
        {"RANK_ID": "1", "RANK_SIZE": "8", "MASTER_ADDR": "10.0.0.1"}, world_size=2, rank=1
    )
    assert (ctx.rank, ctx.world_size, ctx.nnodes, ctx.master_addr) == (9, 16, 2, "10.0.0.1")


def test_slurm():
    env = {
        "SLURM_PROCID": "5",
        "SLURM_LOCALID": "1",
        "SLURM_NTASKS": "8",
        "SLURM_NTASKS_PER_NODE": "4(x2)",
        "SLURM_NODEID": "1",
        "MASTER_ADDR": "node01",
    }
    ctx = resolve(env)
    assert (
        ctx.mode,
        ctx.rank,
        ctx.local_rank,
        ctx.world_size,
        ctx.local_world_size,
        ctx.node_rank,
        ctx.nnodes,
        ctx.master_addr,
        ctx.master_port,
    ) == ("slurm", 5, 1, 8, 4, 1, 2, "node01", 29500)


def test_slurm_multi_node_needs_master_addr():
    env = {
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NTASKS": "8",
        "SLURM_NTASKS_PER_NODE": "4(x2)",
        "SLURM_NODEID": "0",
    }
    with pytest.raises(UsageError, match="set MASTER_ADDR"):
        resolve(env)


def test_open_mpi_single_node_uses_loopback():
    env = {
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    }
    ctx = resolve(env)
    assert (ctx.mode, ctx.rank, ctx.world_size, ctx.master_addr) == ("mpi", 1, 2, "127.0.0.1")


def test_manual_ranks_from_flags():
    ctx = resolve({}, world_size=2, rank=1, dist_url="tcp://127.0.0.1:23456")
    assert (ctx.mode, ctx.rank, ctx.world_size, ctx.master_port) == ("cli", 1, 2, 23456)
    with pytest.raises(UsageError, match="--rank 2 is not below --world-size 2"):
        resolve({}, world_size=2, rank=2)
    with pytest.raises(UsageError, match="needs --rank"):
        resolve({}, world_size=2)


def test_bad_dist_url():
    with pytest.raises(UsageError, match="--dist-url 'nccl://x' is not understood"):
        resolve({}, world_size=2, rank=0, dist_url="nccl://x")


def test_single_process():
    ctx = resolve({})
    assert (ctx.mode, ctx.world_size, ctx.distributed, ctx.is_main) == ("single", 1, False, True)
    with pytest.raises(UsageError, match="--gpu 1 but only 1 cuda"):
        resolve({}, kind=FakeAccelerator(1), gpu=1)


def test_ipv6_master_address_is_bracketed():
    ctx = resolve({"RANK_ID": "0", "RANK_SIZE": "2"}, addr="fd00::1", port=1234)
    assert ctx.init_method == "tcp://[fd00::1]:1234"


def test_launcher_of_reads_without_validating():
    assert launcher_of({}) is None
    assert launcher_of({"RANK": "x"}) == "env"
    assert launcher_of(TORCHRUN) == "torchrun"
    assert launcher_of({"RANK_ID": "0", "RANK_SIZE": "8"}) == "ascend"
    assert launcher_of({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}) is None


def test_describe_mentions_the_rank():
    assert "rank 3/4" in resolve(TORCHRUN).describe()


def test_device_list_maps_local_ranks_to_devices():
    ctx = resolve(
        {}, kind=FakeAccelerator(8), multiprocessing_distributed=True, device_list=(4, 5, 6, 7)
    )
    assert ctx.world_size == 4
    assert [ctx.for_spawned_rank(i).device_index for i in range(4)] == [4, 5, 6, 7]
    assert resolve(TORCHRUN, kind=FakeAccelerator(8), device_list=(2, 3)).device_index == 3
    with pytest.raises(UsageError, match="LOCAL_RANK=1 has no entry in --device-list 2"):
        resolve(TORCHRUN, device_list=(2,))
    with pytest.raises(UsageError, match="names a device beyond the 4 visible"):
        resolve({}, kind=FakeAccelerator(4), multiprocessing_distributed=True, device_list=(3, 4))


@pytest.mark.parametrize(
    "options, says",
    [
        ({"rank": 2, "world_size": 2}, "rank=2 is not below world_size=2"),
        ({"rank": 1}, "rank=1 needs world_size (the number of processes) too"),
        ({"world_size": 2}, "world_size=2 needs rank for this process too"),
        (
            {"dist_url": "nccl://x", "rank": 0, "world_size": 2},
            "init_method 'nccl://x' is not understood",
        ),
        ({"gpu": 0, "local_rank": 1}, None),
    ],
)
def test_python_callers_read_their_own_argument_names(options, says):
    """Errors from the Python API name Python arguments, never command-line flags."""
    if says is None:  # a launcher's environment with a contradicting gpu=
        with pytest.raises(
            UsageError,
            match=r"^gpu=0 contradicts LOCAL_RANK=1: under a "
            r"launcher leave out gpu,",
        ):
            resolve_launch(LaunchOptions(**options), environ=TORCHRUN, kind=CPU)
        return
    with pytest.raises(UsageError, match="^" + re.escape(says)) as raised:
        resolve_launch(LaunchOptions(**options), environ={}, kind=CPU)
    assert "--" not in str(raised.value)


def test_argparse_defaults_of_minus_one_mean_not_given():
    options = LaunchOptions(local_rank=-1, rank=-1, world_size=-1, gpu=-1)
    assert (options.local_rank, options.rank, options.world_size, options.gpu) == (None,) * 4
    assert resolve_launch(options, environ={}, kind=CPU).mode == "single"


# -- run_8p.sh's own variables, checked before any work --------------------------------------


@pytest.mark.parametrize(
    ("variables", "says"),
    [
        ({"NNODES": "2"}, "NNODES=2 needs MASTER_ADDR=<node 0's address> on every node"),
        ({"NPROC_PER_NODE": "0"}, "NPROC_PER_NODE=0 must be a whole number >= 1"),
        ({"MAX_RESTARTS": "-1"}, "MAX_RESTARTS=-1 must be a whole number >= 0"),
        ({"PYTHON": "nopython"}, "PYTHON=nopython is not an executable on PATH"),
        ({"LOG_DIR": "a_file"}, "LOG_DIR=a_file is not a folder"),
        ({"LOG_DIR": "/proc/logs"}, "LOG_DIR=/proc/logs cannot hold the rank logs"),
    ],
)
def test_run_8p_refuses_a_bad_variable_in_one_line_before_the_demo_data(tmp_path, variables, says):
    """Each is one line and exit code 2, and nothing is made: not the demo data (6,000 files),
    not the log folder."""
    from support.launchers import child_env
    from support.paths import REPO

    (tmp_path / "a_file").write_text("")
    env = child_env(**{"NPROC_PER_NODE": "2", "PYTHON": sys.executable, **variables})
    result = subprocess.run(
        ["bash", str(REPO / "launch" / "run_8p.sh")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stderr.splitlines()) == (2, [result.stderr.strip()])
    assert result.stderr.startswith(f"error: {says}"), result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


GLOO_PEER_CLOSED = (
    "[../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[127.0.0.1]:54476"
)


@pytest.mark.parametrize("rank", [0, 1])
def test_a_peer_that_closed_its_connection_is_not_called_an_unreachable_master(rank):
    """gloo's "Connection closed by peer" while the ranks connect to each other comes after
    every rank reached the master: rank 0 (the master itself) used to say it could not
    reach the master. It names the peer's end instead, and never the master's address."""
    ctx = LaunchContext(
        mode="spawn",
        rank=rank,
        local_rank=rank,
        world_size=2,
        local_world_size=2,
        node_rank=0,
        nnodes=1,
        master_addr="127.0.0.1",
        master_port=38667,
        device_index=rank,
    )
    error = explain_setup_error(RuntimeError(GLOO_PEER_CLOSED), ctx, "--dist-timeout 30s")
    assert isinstance(error, UsageError)
    assert str(error).startswith(
        f"rank {rank}: another rank closed its connection while the 2 ranks connected to each "
        "other (it crashed or stopped: its own output says why)"
    ), error
    assert "master" not in str(error), error

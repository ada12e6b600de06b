"""devicekit's flat API as a user script meets it.

In-process tests cover what needs no second process (the device functions on a CPU,
unwrap/no_sync, checkpoints, AMP defaults); the rest start real processes with
tests/support/processes.py (own session, output in files, a timeout on every wait): a
script's own mp.spawn, launch() failing and supervising, threads per rank, a hard-coded
MASTER_PORT under torchrun, and two processes that claim one rank.
"""

import os
import re
import sys
import textwrap

import pytest
import torch

import devicekit
from devicekit import runtime
from devicekit.environments import find_free_port
from support.launchers import PY, child_env, start
from support.processes import Processes, describe

TIMEOUT_S = 120


def script(tmp_path, body, name="script.py"):
    """A user script in `tmp_path` with `body` (dedented); its path."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def env(**extra):
    """A child's environment (support.launchers.child_env) without OMP_NUM_THREADS: devicekit
    chooses the threads per rank."""
    return child_env(OMP_NUM_THREADS=None, **extra)


def run(tmp_path, path, *args, launcher="python", nproc=None, timeout=TIMEOUT_S, **extra):
    """Run script `path` with `args` as `launcher` starts it (support.launchers; python: the
    script's own launch() decides how many ranks) with the variables `extra`; what the
    process started left."""
    with Processes(tmp_path / "processes") as procs:
        started = start(
            procs, launcher, path, args, nproc, tmp_path, env=env(), name="run", **extra
        )
        return procs.finish_all(started, timeout)[0]


# -- in one process ---------------------------------------------------------------------------


def test_device_functions_on_a_cpu():
    runtime.kind("cpu")
    assert devicekit.device() == torch.device("cpu") and devicekit.device(3).type == "cpu"
    assert devicekit.device_type() == "cpu" and devicekit.backend() == "gloo"
    assert not devicekit.is_available() and not devicekit.pin_memory()
    assert devicekit.device_count() == 1
    assert devicekit.default_ranks_per_node() == min(2, len(os.sched_getaffinity(0)))
    assert devicekit.current_device() == 0
    assert devicekit.memory_allocated() == devicekit.max_memory_reserved() == 0
    devicekit.set_device(0), devicekit.synchronize(), devicekit.empty_cache()
    devicekit.reset_peak_memory_stats()
    devicekit.manual_seed(7)
    first = torch.rand(3)
    devicekit.manual_seed_all(7)  # on a CPU the device generator is the CPU's
    assert torch.equal(torch.rand(3), first)


def test_is_accelerator_reads_the_device_type_of_any_spelling():
    for device in ("cuda", "cuda:1", "npu", "npu:0", torch.device("cpu", 0)):
        expected = not str(device).startswith("cpu")
        assert devicekit.is_accelerator(device) is expected, device
    assert not devicekit.is_accelerator("meta") and not devicekit.is_accelerator("mps")


def test_a_cpu_has_bf16():
    runtime.kind("cpu")
    assert devicekit.is_bf16_supported() is True


def test_a_usage_error_escaping_a_script_is_one_line_and_exit_2(tmp_path):
    path = script(
        tmp_path,
        """\
        import devicekit
        devicekit.set_device(0)  # asks for the device kind: the NPU, absent here
        print("not reached")
        """,
    )
    result = run(tmp_path, path, DEVICEKIT_DEVICE="npu")
    assert result.returncode == 2, describe([result])
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith("error: DEVICEKIT_DEVICE=npu: torch_npu is not installed")
    assert "Traceback" not in result.stderr and "not reached" not in result.stdout


def test_other_exceptions_keep_their_traceback(tmp_path):
    path = script(tmp_path, "import devicekit\nraise ValueError('a bug')\n")
    result = run(tmp_path, path)
    assert result.returncode == 1 and "Traceback" in result.stderr
    assert "ValueError: a bug" in result.stderr


def test_before_init_a_plain_process_is_rank_0_of_1():
    assert (devicekit.rank(), devicekit.world_size(), devicekit.local_rank()) == (0, 1, 0)
    assert devicekit.is_main_process()


def test_one_device_kind_per_process():
    runtime.kind("cpu")
    with pytest.raises(devicekit.UsageError, match=r"^device_type='gpu': this torch has no CUDA"):
        runtime.kind("gpu")


def test_wrap_ddp_needs_the_group_first():
    with pytest.raises(devicekit.UsageError, match=r"call devicekit.init_distributed\(\) first"):
        devicekit.wrap_ddp(torch.nn.Linear(2, 2))


def test_world_size_1_behaves_like_any_launcher():
    """DistributedSampler, dist.get_rank(), model.module and no_sync work with one rank."""
    import torch.distributed as dist
    from torch.utils.data import DistributedSampler

    devicekit.init_distributed(device_type="cpu")
    assert dist.get_rank() == 0 and len(DistributedSampler(range(10))) == 10
    model = devicekit.wrap_ddp(torch.nn.Linear(4, 2))
    assert isinstance(model.module, torch.nn.Linear)
    with devicekit.no_sync(model):
        model(torch.ones(3, 4)).sum().backward()
    assert devicekit.unwrap(model) is model.module


def test_no_sync_and_unwrap_on_plain_and_compiled_models():
    plain = torch.nn.Linear(2, 2)
    with devicekit.no_sync(plain):
        pass
    assert devicekit.unwrap(plain) is plain
    assert devicekit.unwrap(torch.nn.DataParallel(plain)) is plain
    assert devicekit.unwrap(torch.compile(plain)) is plain


def test_checkpoints_are_portable(tmp_path):
    runtime.kind("cpu")
    model = torch.nn.DataParallel(torch.nn.Linear(3, 2))
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    path = tmp_path / "ckpt.pt"
    devicekit.save_checkpoint(
        path,
        {
            "model": model,
            "optimizer": optimizer,
            "scaler": devicekit.GradScaler(),
            "step": 3,
            "old": {"module.weight": torch.zeros(1)},
        },
    )
    loaded = devicekit.load_checkpoint(path)
    assert set(loaded["model"]) == {"weight", "bias"}  # no "module."
    assert loaded["old"].keys() == {"weight"}
    assert loaded["step"] == 3 and loaded["scaler"] == {}
    fresh = torch.nn.Linear(3, 2)
    fresh.load_state_dict(loaded["model"])
    assert devicekit.fingerprint(fresh) == devicekit.fingerprint(model)
    torch.optim.SGD(fresh.parameters(), 0.1, momentum=0.9).load_state_dict(loaded["optimizer"])
    assert not [p.name for p in tmp_path.iterdir() if p.name != "ckpt.pt"]  # no temporaries


def test_load_checkpoint_refuses_code_in_one_line(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("true",))

    path = tmp_path / "evil.pt"
    torch.save({"model": Evil()}, path)
    with pytest.raises(
        devicekit.UsageError,
        match=f"^checkpoint '{path}' holds objects other "
        "than tensors and plain values, which could "
        "run code when loaded; refusing it",
    ):
        devicekit.load_checkpoint(path)


def test_autocast_and_grad_scaler_follow_the_device_default(monkeypatch):
    cpu = runtime.kind("cpu")
    monkeypatch.setattr(type(cpu), "default_amp", lambda self: False)  # an AVX2-only CPU
    with devicekit.autocast():
        assert torch.nn.Linear(2, 2)(torch.ones(1, 2)).dtype == torch.float32
    monkeypatch.setattr(type(cpu), "default_amp", lambda self: True)  # native bf16
    with devicekit.autocast():
        assert torch.nn.Linear(2, 2)(torch.ones(1, 2)).dtype == torch.bfloat16
    assert not devicekit.GradScaler().is_enabled()  # bf16 needs no loss scaling
    assert devicekit.GradScaler(dtype="float16").is_enabled()


# -- a script's own processes -------------------------------------------------------------------

_OWN_SPAWN = """
    import sys
    import torch.multiprocessing as mp
    import devicekit

    def main(i, n, told):
        if told:
            devicekit.init_distributed(rank=i, world_size=n)
        else:
            devicekit.init_distributed()
        print(f"rank {devicekit.rank()}/{devicekit.world_size()}", flush=True)
        devicekit.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(main, args=(2, True), nprocs=2)
        print("told: done", flush=True)
        mp.spawn(main, args=(2, False), nprocs=2)
"""


@pytest.fixture(scope="module")
def own_spawn(tmp_path_factory):
    """One script that runs its own mp.spawn twice: children told their rank, then children
    left to find it (one process and its 4 children, instead of a script per case)."""
    folder = tmp_path_factory.mktemp("own-spawn")
    return run(
        folder,
        script(folder, _OWN_SPAWN),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=find_free_port(),
    )


def test_init_distributed_in_a_scripts_own_mp_spawn(own_spawn):
    told, _, _ = own_spawn.stdout.partition("told: done")
    assert "told: done" in own_spawn.stdout, describe([own_spawn])
    assert sorted(re.findall(r"rank \d/\d", told)) == ["rank 0/2", "rank 1/2"]


def test_an_mp_spawn_child_without_its_rank_is_refused_not_run_alone(own_spawn):
    """Two children silently training as two separate runs: refused, naming the fix."""
    result = own_spawn
    assert result.returncode != 0
    assert "rank 0/1" not in result.stdout
    assert (
        "started by multiprocessing (the script's own mp.spawn?) without its rank" in result.stderr
    )
    assert "init_distributed(rank=i, world_size=n)" in result.stderr


_LAUNCHED = """
    import os, sys, torch
    import devicekit

    def main(local_rank):
        if sys.argv[1] == "hard-coded-port":
            os.environ["MASTER_ADDR"] = "localhost"
            os.environ["MASTER_PORT"] = "1"  # as the DDP tutorial hard-codes 12355
        devicekit.init_distributed(timeout=30)
        print(f"rank {devicekit.rank()}/{devicekit.world_size()} threads "
              f"{torch.get_num_threads()}", flush=True)
        devicekit.barrier()  # every rank has printed its line before rank 1 fails
        if sys.argv[1] == "raise" and devicekit.rank() == 1:
            raise ValueError("rank 1 fails on purpose")
        devicekit.barrier()

    if __name__ == "__main__":
        try:
            devicekit.launch(main)
        except devicekit.RankFailed as failure:
            print(f"caught: {failure} (exit code {failure.exit_code})", flush=True)
            raise
"""


@pytest.fixture(scope="module")
def launched_and_failed(tmp_path_factory):
    """`python script.py raise`: launch() starts 2 ranks, each prints its thread count, then
    rank 1 raises. (launch() exiting 0 when every rank succeeds: the `python` runs of
    tests/test_examples.py.)"""
    folder = tmp_path_factory.mktemp("launched")
    return run(folder, script(folder, _LAUNCHED), "raise", timeout=60)


def test_launch_spawns_ranks_with_one_thread_share_each(launched_and_failed):
    result = launched_and_failed
    threads = max(1, len(os.sched_getaffinity(0)) // 2)
    assert sorted(re.findall(r"rank \d/\d threads \d+", result.stdout)) == [
        f"rank 0/2 threads {threads}",
        f"rank 1/2 threads {threads}",
    ], describe([result])


def test_launch_raises_and_exits_non_zero_when_a_rank_fails(launched_and_failed):
    result = launched_and_failed
    assert result.returncode == 1, describe([result])
    assert "ValueError: rank 1 fails on purpose" in result.stderr
    assert (
        "error: local rank 1 exited with code 1 (an uncaught exception, traceback above); "
        "the other ranks were stopped"
    ) in result.stderr
    assert "caught: local rank 1 exited with code 1" in result.stdout


def test_launch_refuses_a_bad_process_count(monkeypatch, capsys):
    """Refused before any rank starts: one line and exit code 2, as a script calling
    launch() shows it (in this process: no rank is started to be refused)."""
    monkeypatch.setenv("DEVICEKIT_NPROC_PER_NODE", "two")
    with pytest.raises(SystemExit) as exited:
        devicekit.launch(print)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == (
        "",
        "error: DEVICEKIT_NPROC_PER_NODE='two' must be a whole number of processes, at least 1\n",
    )


def test_a_hard_coded_master_port_under_torchrun_is_ignored_once(tmp_path):
    result = run(
        tmp_path,
        script(tmp_path, _LAUNCHED),
        "hard-coded-port",
        launcher="torchrun",
        nproc=2,
        timeout=90,
    )
    assert result.returncode == 0, describe([result])
    warnings = [line for line in result.stderr.splitlines() if "set by the script" in line]
    assert len(warnings) == 1, result.stderr  # MASTER_ADDR=localhost is the same host
    assert warnings[0].startswith(
        "devicekit: warning: MASTER_PORT='1' set by the script is "
        "ignored: the launcher (torchrun) runs this job at MASTER_PORT="
    )


def test_two_processes_claiming_one_rank_are_named_not_a_port_clash(tmp_path):
    body = """
        import devicekit

        def main(local_rank):
            devicekit.init_distributed(timeout=12)

        devicekit.launch(main)
    """
    path = script(tmp_path, body)
    port = find_free_port()
    common = dict(WORLD_SIZE=3, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    with Processes(tmp_path / "processes") as procs:
        first = procs.start("rank0", [PY, path], env(RANK=0, LOCAL_RANK=0, **common))
        second = procs.start("rank1", [PY, path], env(RANK=1, LOCAL_RANK=1, **common))
        twin = procs.start("rank1-twin", [PY, path], env(RANK=1, LOCAL_RANK=1, **common))
        zero_twin = procs.start("rank0-twin", [PY, path], env(RANK=0, LOCAL_RANK=0, **common))
        results = procs.finish_all([first, second, twin, zero_twin], 60)
    for rank in (0, 1):
        claims = [r for r in results if f"two processes claim rank {rank}" in r.stderr]
        assert len(claims) == 1, describe(results)
        assert claims[0].returncode == 2 and "already in use" not in claims[0].stderr


class _Writes:
    """A stream that keeps each write() call apart."""

    def __init__(self):
        self.writes = []

    def write(self, text):
        self.writes.append(text)
        return len(text)

    def flush(self):
        pass


def test_warnings_and_errors_are_whole_lines_in_one_write(monkeypatch):
    """Ranks share their launcher's stderr; a line written in two parts (print() writes the
    newline apart when Python runs unbuffered) can get another rank's line glued to it."""
    stderr = _Writes()
    monkeypatch.setattr(sys, "stderr", stderr)
    devicekit.warn("careful")

    @devicekit.exit_on_usage_error
    def command():
        raise devicekit.UsageError("--lr 0 must be a positive, finite number")

    with pytest.raises(SystemExit):
        command()
    assert stderr.writes == [
        "devicekit: warning: careful\n",
        "error: --lr 0 must be a positive, finite number\n",
    ]


def test_a_user_print_on_a_rank_is_one_write_even_unbuffered(monkeypatch):
    """init_distributed() makes a rank of a distributed run line-buffered: a user's own
    print() then reaches the shared stream in one write (python -u writes the newline apart),
    so lines of two ranks stay apart."""
    import io

    from devicekit.errors import keep_lines_whole

    class Raw(io.RawIOBase):
        def __init__(self):
            self.writes = []

        def writable(self):
            return True

        def write(self, data):
            self.writes.append(bytes(data))
            return len(data)

    raw = Raw()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, write_through=True))  # python -u
    keep_lines_whole()
    print("rank", 1, "done")
    assert raw.writes == [b"rank 1 done\n"]

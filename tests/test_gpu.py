"""The CUDA paths on a real GPU: what the rest of the suite unit-tests with torch.cuda patched.

Every test here is marked `gpu` (`python -m pytest -m gpu`; benchmarks/gpu.sh runs them
first on a GPU machine) and skips, naming what is missing, on a machine without CUDA:
"needs a CUDA GPU: ...", or "needs 2 CUDA GPUs: ..." for the two-rank nccl runs.

In this process: the device functions, fp16 and bf16 autocast with devicekit's GradScaler,
a checkpoint written on the GPU. In real processes (tests/support/processes.py: own
session, output in files, a timeout on every wait): DDP with device_ids over nccl (1 rank,
and 2 where two GPUs exist), the checkpoint read where no GPU is visible, `devicekit check`,
main.py, a CUDA-only script of tests/port_corpus after `devicekit port` (and its device
questions answered as the original answers them), devicekit.shard
(FSDP2 over nccl: bf16 by the device's policy, fp32 with DDP's losses, a checkpoint folder
resumed), and running out of the GPU's memory.
"""

import json
import math
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import devicekit
from conftest import clean_environ
from devicekit import runtime
from support.launchers import DEVICEKIT, PY, devicekit_cmd, start
from support.paths import CORPUS, REPO
from support.processes import Processes, describe
from support.runs import CHECKPOINT_KEYS, TINY, main_py, read_metrics
from trainer import state

RUN_TIMEOUT_S = 180  # one of these runs takes 5-20 s on a GPU machine (CUDA and NCCL start-up)

# Counted when the module is imported, before conftest's fixtures remove the visible-devices
# variables for each test: the children are given the GPUs this process was given.
VISIBLE = os.environ.get("CUDA_VISIBLE_DEVICES")
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
NO_CUDA = "needs a CUDA GPU: torch.cuda.is_available() is False on this machine"


def needs_gpus(count):
    """Skip unless `count` CUDA GPUs are visible, saying which is missing: CUDA itself, or
    enough GPUs."""
    if GPUS == 0:
        return pytest.mark.skipif(True, reason=NO_CUDA)
    return pytest.mark.skipif(
        GPUS < count, reason=f"needs {count} CUDA GPUs: this machine has {GPUS}"
    )


pytestmark = [pytest.mark.gpu, needs_gpus(1)]


# -- helpers ------------------------------------------------------------------------------


def gpu_env(**extra):
    """A launcher-free environment for a child on this process's GPUs: devicekit importable,
    cuda forced, unbuffered output, plus `extra`."""
    given = {} if VISIBLE is None else {"CUDA_VISIBLE_DEVICES": VISIBLE}
    return clean_environ(**{"DEVICEKIT_DEVICE": "cuda", "PYTHONUNBUFFERED": 1, **given, **extra})


def one_gpu():
    """CUDA_VISIBLE_DEVICES for a child that is to see exactly one of this process's GPUs."""
    return (VISIBLE or "0").split(",")[0].strip()


def script(tmp_path, body, name="script.py"):
    """A user script in `tmp_path` with `body` (dedented); its path."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def run(tmp_path, name, argv, env, timeout=RUN_TIMEOUT_S):
    """Run `argv` to its end (a timeout, nothing left running); what it left."""
    with Processes(tmp_path / name) as procs:
        [result] = procs.finish_all([procs.start(name, argv, env)], timeout)
    return result


def launched(tmp_path, launcher, program, args, nproc, env, timeout=RUN_TIMEOUT_S):
    """Run `program` with `args` started the way `launcher` does with `nproc` ranks
    (support.launchers) to its end; what each process started left."""
    with Processes(tmp_path / launcher) as procs:
        started = start(procs, launcher, program, args, nproc, tmp_path, env=env)
        return procs.finish_all(started, timeout)


def succeeded(*results):
    """`results`, once each exited 0 without a traceback."""
    for result in results:
        assert result.returncode == 0, describe(results)
        assert "Traceback" not in result.stderr, describe(results)
    return results[0] if len(results) == 1 else results


def regression(device, seed=0):
    """A small MLP on `device` and one fixed batch of a linear target (inputs, targets)."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    inputs = torch.randn(256, 32, generator=torch.Generator().manual_seed(seed))
    targets = inputs.sum(dim=1, keepdim=True) / 32**0.5
    return model.to(device), inputs.to(device), targets.to(device)


def tensors(obj):
    """Every tensor in nested dicts, lists and tuples."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from tensors(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from tensors(value)


@pytest.fixture
def on_cuda(monkeypatch):
    """This process on its GPU through devicekit (the kind settled as cuda); its device.
    The current device is cuda:0 again afterwards."""
    if VISIBLE is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", VISIBLE)
    runtime.kind("cuda")
    yield devicekit.device()
    torch.cuda.set_device(0)


# -- the device, in this process ------------------------------------------------------------


def test_device_functions_on_a_gpu(on_cuda):
    assert devicekit.device_type() == devicekit.accelerator_type() == "cuda"
    assert devicekit.backend() == "nccl"
    assert devicekit.is_available() and devicekit.pin_memory() and devicekit.is_accelerator(on_cuda)
    assert devicekit.device_count() == devicekit.default_ranks_per_node() == GPUS
    assert on_cuda == torch.device("cuda", 0)  # a single process is local rank 0
    assert devicekit.is_bf16_supported() == torch.cuda.is_bf16_supported()

    last = GPUS - 1
    devicekit.set_device(f"cuda:{last}")
    assert devicekit.current_device() == torch.cuda.current_device() == last
    assert devicekit.device() == torch.device("cuda", last)
    devicekit.reset_peak_memory_stats()
    block = torch.ones(1 << 20, device=devicekit.device())  # 4 MiB
    devicekit.synchronize()
    assert block.device == torch.device("cuda", last)
    assert devicekit.memory_allocated() >= 4 << 20
    assert devicekit.max_memory_allocated() >= 4 << 20
    assert devicekit.memory_reserved() >= devicekit.memory_allocated()
    del block
    devicekit.empty_cache()

    devicekit.set_device(0)
    assert devicekit.device() == torch.device("cuda", 0)
    devicekit.manual_seed(7)
    first = torch.randn(8, device=devicekit.device())
    devicekit.manual_seed(7)
    assert torch.equal(first, torch.randn(8, device=devicekit.device()))


# -- mixed precision --------------------------------------------------------------------------


def test_fp16_autocast_with_the_grad_scaler(on_cuda):
    """devicekit's GPU default: fp16 autocast, a GradScaler that scales, grows the scale
    after clean steps, and skips a step whose gradients overflow (halving the scale)."""
    assert devicekit.amp_enabled() and devicekit.amp_dtype() == torch.float16
    assert devicekit.prefers_channels_last(True)
    model, inputs, targets = regression(on_cuda)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = devicekit.GradScaler(init_scale=2.0**4, growth_interval=5)
    assert scaler.is_enabled()
    losses = []
    for _ in range(20):
        with devicekit.autocast():
            output = model(inputs)
            loss = F.mse_loss(output.float(), targets)
        assert output.dtype == torch.float16
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    assert all(map(math.isfinite, losses)) and losses[-1] < losses[0] / 2, losses
    assert scaler.get_scale() == 2.0**8  # 20 clean steps: doubled every 5

    overflowing = devicekit.GradScaler(init_scale=2.0**100)  # fp16 gradients become inf
    before = [p.detach().clone() for p in model.parameters()]
    with devicekit.autocast():
        loss = F.mse_loss(model(inputs).float(), targets)
    optimizer.zero_grad()
    overflowing.scale(loss).backward()
    overflowing.step(optimizer)
    overflowing.update()
    assert overflowing.get_scale() == 2.0**99
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_bf16_autocast_needs_no_grad_scaler(on_cuda):
    """bf16 keeps fp32's exponent range: devicekit's GradScaler for it is a no-op."""
    if not devicekit.is_bf16_supported():
        pytest.skip("needs a GPU with bf16 (Ampere or later)")
    model, inputs, targets = regression(on_cuda)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = devicekit.GradScaler(dtype="bfloat16")
    assert not scaler.is_enabled()
    losses = []
    for _ in range(20):
        with devicekit.autocast(dtype="bfloat16"):
            output = model(inputs)
            loss = F.mse_loss(output.float(), targets)
        assert output.dtype == torch.bfloat16
        optimizer.zero_grad()
        scaled = scaler.scale(loss)
        assert scaled is loss
        scaled.backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    assert all(map(math.isfinite, losses)) and losses[-1] < losses[0] / 2, losses


# -- checkpoints ------------------------------------------------------------------------------

_READ_ON_A_CPU = """
    import json, sys
    import devicekit
    import torch

    checkpoint = devicekit.load_checkpoint(sys.argv[1])
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    model.load_state_dict(checkpoint["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    optimizer.load_state_dict(checkpoint["optimizer"])
    probe = torch.linspace(-1, 1, 4 * 32).reshape(4, 32)
    print(json.dumps({
        "cuda": torch.cuda.is_available(),
        "device": str(devicekit.device()),
        "fingerprint": devicekit.fingerprint(model),
        "output": model(probe).tolist(),
        "momentum_buffers": sum("momentum_buffer" in s for s in optimizer.state.values()),
        "scale": checkpoint["scaler"]["scale"],
        "step": checkpoint["step"],
    }))
"""


def test_a_checkpoint_written_on_the_gpu_is_read_on_a_cpu(on_cuda, tmp_path):
    model, inputs, targets = regression(on_cuda)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = devicekit.GradScaler(init_scale=2.0**8)  # low enough that no step is skipped
    for _ in range(3):
        with devicekit.autocast():
            loss = F.mse_loss(model(inputs).float(), targets)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    path = tmp_path / "ckpt.pt"
    devicekit.save_checkpoint(
        path, {"model": model, "optimizer": optimizer, "scaler": scaler, "step": 3}
    )
    # Every tensor is stored on the CPU: plain torch.load needs no map_location.
    stored = torch.load(path, weights_only=True)
    assert {t.device.type for t in tensors(stored)} == {"cpu"}
    assert stored["scaler"]["scale"] == scaler.get_scale()
    # Loaded here, by default onto this rank's device.
    loaded = devicekit.load_checkpoint(path)
    assert {t.device for t in tensors(loaded["model"])} == {on_cuda}

    probe = torch.linspace(-1, 1, 4 * 32).reshape(4, 32)
    with torch.no_grad():
        expected = model(probe.to(on_cuda)).cpu()
    # A process that sees no GPU at all, as a CPU machine.
    result = succeeded(
        run(
            tmp_path,
            "read-on-cpu",
            [PY, script(tmp_path, _READ_ON_A_CPU), path],
            clean_environ(DEVICEKIT_DEVICE="cpu", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED=1),
        )
    )
    read = json.loads(result.stdout)
    assert read["cuda"] is False and read["device"] == "cpu"
    assert read["fingerprint"] == devicekit.fingerprint(model)
    assert read["momentum_buffers"] == len(list(model.parameters()))
    assert read["scale"] == scaler.get_scale() and read["step"] == 3
    torch.testing.assert_close(torch.tensor(read["output"]), expected, atol=1e-4, rtol=1e-4)


# -- DDP over nccl ----------------------------------------------------------------------------

_DDP = """
    import devicekit
    import torch
    import torch.distributed as dist


    def main(local_rank):
        devicekit.init_distributed(timeout=120)
        device = devicekit.device()
        torch.manual_seed(0)  # the same initial weights on every rank
        net = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
        )
        model = devicekit.wrap_ddp(net.to(device))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        scaler = devicekit.GradScaler()
        data = torch.Generator().manual_seed(devicekit.rank())  # each rank its own batches
        losses = []
        for _ in range(30):
            x = torch.randn(64, 32, generator=data).to(device)
            with devicekit.autocast():
                loss = (model(x).float() - x.sum(1, keepdim=True) / 32**0.5).pow(2).mean()
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            losses.append(loss.item())
        print(
            f"rank {devicekit.rank()}/{devicekit.world_size()} on {device}: "
            f"backend {dist.get_backend()}, device_ids {model.device_ids}, "
            f"parameters on {next(model.parameters()).device}, "
            f"loss {losses[0]:.4f} -> {losses[-1]:.4f}, weights {devicekit.fingerprint(model)}",
            flush=True,
        )
        devicekit.destroy_process_group()


    if __name__ == "__main__":
        devicekit.launch(main)
"""
_DDP_LINE = re.compile(
    r"rank (\d)/(\d) on (cuda:\d): backend (\w+), device_ids (\[\d\]), parameters on "
    r"(cuda:\d), loss (\d+\.\d+) -> (\d+\.\d+), weights ([0-9a-f]{16})"
)


def ddp_ranks(stdout):
    """{rank: (world, device, backend, device_ids, parameters' device, first loss, last loss,
    weights)} from the lines _DDP prints (ranks share one stdout: not anchored)."""
    return {
        int(rank): (int(world), device, backend, ids, params, float(first), float(last), weights)
        for rank, world, device, backend, ids, params, first, last, weights in (
            _DDP_LINE.findall(stdout)
        )
    }


def test_ddp_over_nccl_with_one_rank_under_torchrun(tmp_path):
    result = succeeded(*launched(tmp_path, "torchrun", script(tmp_path, _DDP), [], 1, gpu_env()))
    ranks = ddp_ranks(result.stdout)
    assert list(ranks) == [0], result.stdout
    world, device, backend, ids, params, first, last, _ = ranks[0]
    assert (world, device, backend, ids, params) == (1, "cuda:0", "nccl", "[0]", "cuda:0")
    assert math.isfinite(last) and last < first / 2, result.stdout


@needs_gpus(2)
def test_ddp_over_nccl_with_two_ranks_on_two_gpus(tmp_path):
    """devicekit.launch() starts one rank per GPU; each trains on its own GPU with its own
    batches, and the gradient all-reduce leaves both with the same weights."""
    result = succeeded(*launched(tmp_path, "python", script(tmp_path, _DDP), [], 2, gpu_env()))
    ranks = ddp_ranks(result.stdout)
    assert sorted(ranks) == [0, 1], result.stdout
    for rank, (world, device, backend, ids, params, first, last, _) in ranks.items():
        assert (world, device, backend, ids, params) == (
            2,
            f"cuda:{rank}",
            "nccl",
            f"[{rank}]",
            f"cuda:{rank}",
        )
        assert math.isfinite(last) and last < first / 2, result.stdout
    assert ranks[0][-1] == ranks[1][-1], "the ranks' weights differ"
    assert ranks[0][5] != ranks[1][5], "both ranks trained on the same batches"


# -- devicekit check --------------------------------------------------------------------------

_BANDWIDTH_HEADER = re.compile(r"^ +size +time \(us\) +algbw \(GB/s\) +busbw \(GB/s\)$", re.M)
_BANDWIDTH_ROW = re.compile(r"^ +(\d+ (?:B|KiB|MiB|GiB)) +([\d.]+) +([\d.]+) +([\d.]+)$", re.M)


def bus_bandwidth(stdout):
    """{message size: busbw GB/s} from check's table, which must be there, up to 64 MiB."""
    assert _BANDWIDTH_HEADER.search(stdout), stdout
    rows = {size: float(busbw) for size, _, _, busbw in _BANDWIDTH_ROW.findall(stdout)}
    assert list(rows)[-1:] == ["64 MiB"] and rows["64 MiB"] > 0, stdout
    return rows


def test_check_on_one_gpu_asks_for_two_ranks(tmp_path):
    """A machine with one GPU starts one rank: check says in one line what to do."""
    result = run(
        tmp_path,
        "check",
        devicekit_cmd("check", "--device", "cuda"),
        gpu_env(CUDA_VISIBLE_DEVICES=one_gpu()),
    )
    assert result.returncode == 2, describe([result])
    assert result.stderr.strip() == (
        "error: devicekit check needs at least 2 ranks and cuda gives 1 here: pass "
        "--nproc-per-node 2 or more"
    )


def test_check_with_two_ranks_sharing_one_gpu_over_gloo(tmp_path, record_property):
    """NCCL refuses two ranks on one GPU; gloo moves CUDA tensors, so one GPU proves the
    check's CUDA side: two ranks started as two one-GPU nodes of a shell loop."""
    args = ["check", "--device", "cuda", "--dist-backend", "gloo"]
    env = gpu_env(CUDA_VISIBLE_DEVICES=one_gpu())
    with Processes(tmp_path / "ranks") as procs:
        started = start(procs, "nodes", DEVICEKIT, args, 2, tmp_path, env=env, name="rank")
        results = procs.finish_all(started, RUN_TIMEOUT_S)
    rank0, rank1 = succeeded(*results)
    lines = rank0.stdout.splitlines()
    assert lines[0] == (
        "devicekit check: OK: 2 ranks on 2 node(s), launcher env, device cuda, backend gloo"
    ), rank0.stdout
    assert re.search(r"^ +rank +0 \(local 0\) \S+ cuda:0: ok$", rank0.stdout, re.M)
    assert re.search(r"^ +rank +1 \(local 0\) \S+ cuda:0: ok$", rank0.stdout, re.M)
    assert rank1.stdout == "", "only rank 0 reports"
    record_property("check_gloo_one_gpu_busbw_64MiB_GBps", bus_bandwidth(rank0.stdout)["64 MiB"])


@needs_gpus(2)
def test_check_over_nccl_on_two_gpus(tmp_path, record_property):
    # python -m devicekit check --device cuda --nproc-per-node 2
    args = ["check", "--device", "cuda"]
    result = succeeded(*launched(tmp_path, "spawn", DEVICEKIT, args, 2, gpu_env()))
    assert result.stdout.splitlines()[0] == (
        "devicekit check: OK: 2 ranks on 1 node(s), launcher spawn, device cuda, backend nccl"
    ), result.stdout
    for rank in (0, 1):
        assert re.search(
            rf"^ +rank +{rank} \(local {rank}\) \S+ cuda:{rank}: ok$", result.stdout, re.M
        )
    record_property("check_nccl_two_gpus_busbw_64MiB_GBps", bus_bandwidth(result.stdout)["64 MiB"])


# -- main.py and a ported script --------------------------------------------------------------


def test_main_py_trains_on_cuda_in_fp16_with_a_loss_scaler(tmp_path):
    output = tmp_path / "out"
    result = succeeded(
        run(tmp_path, "main", main_py(*TINY, "--device", "cuda", "--output-dir", output), gpu_env())
    )
    assert re.fullmatch(
        r"=> tinynet on cuda \(single: rank 0/1, .*\), batch 16 per process, "
        r"0 loader workers per process, AMP float16, channels_last",
        result.stdout.splitlines()[0],
    ), result.stdout
    assert re.search(r"^=> rank 0/1 done: weights [0-9a-f]{16}$", result.stdout, re.M)

    checkpoint = torch.load(output / state.CHECKPOINT, weights_only=True)
    assert set(checkpoint) == CHECKPOINT_KEYS | {"scaler"}  # fp16: the scaler's state too
    assert checkpoint["epoch"] == 2 and checkpoint["arch"] == "tinynet"
    assert {t.device.type for t in tensors(checkpoint)} == {"cpu"}
    assert math.isfinite(checkpoint["scaler"]["scale"]) and checkpoint["scaler"]["scale"] > 0
    rows = read_metrics(output)
    assert [row["epoch"] for row in rows] == [0, 1]
    for row in rows:
        assert math.isfinite(row["train_loss"]) and math.isfinite(row["val_loss"]), rows
        assert row["val_samples"] == 2 * 16 and row["world_size"] == 1
        assert row["images_per_sec"] > 0


@pytest.fixture(scope="module")
def ported_gpt(tmp_path_factory):
    """tests/port_corpus/gpt_amp.py (CUDA-only: torch.cuda.amp, nccl, "cuda:N") ported by the
    command into a fresh folder, with no hand edit."""
    folder = tmp_path_factory.mktemp("ported")
    result = run(
        folder,
        "port",
        devicekit_cmd("port", CORPUS / "gpt_amp.py", "--out", folder / "out"),
        gpu_env(),
    )
    assert result.returncode == 0, describe([result])  # 0: nothing left to port by hand
    return folder / "out" / "gpt_amp.py"


@pytest.mark.parametrize("launcher", ["python", "torchrun"])
def test_a_ported_cuda_only_script_trains_on_the_gpu(ported_gpt, tmp_path, launcher):
    nproc = 1 if launcher == "torchrun" else None  # python: the script's own launch decides
    result = succeeded(*launched(tmp_path, launcher, ported_gpt, [], nproc, gpu_env()))
    [(iterations, processes, peak)] = re.findall(
        r"(\d+) iterations in [\d.]+s on (\d+) process\(es\); peak memory ([\d.]+) MiB",
        result.stdout,
    )
    assert (iterations, processes) == ("60", "1"), result.stdout
    assert float(peak) > 0, "nothing was allocated on the GPU (0.0 MiB is what a CPU reports)"
    [(final, first)] = re.findall(r"final loss (\d+\.\d+) \(first (\d+\.\d+)\)", result.stdout)
    assert float(final) < float(first) / 4, result.stdout


def test_ported_device_questions_answer_on_the_gpu_as_the_original():
    """tests/port_corpus/device_questions.py, as written and ported: on a GPU both pick
    nccl, autocast in fp16, synchronize and keep the loss scaler (on the npu stand-in the
    original answers none of these and the ported code all: test_port.py)."""
    result = subprocess.run(
        [sys.executable, str(REPO / "tests" / "support" / "device_questions.py")],
        env=gpu_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr
    gpu = ["nccl", "torch.float16", True, True]
    assert json.loads(result.stdout) == {"original": gpu, "ported": gpu}


# -- sharded training (FSDP2 over nccl) -------------------------------------------------------

GPT = REPO / "examples" / "gpt_pretrain.py"
LOSS = re.compile(r"^iter (\d+) loss (\d+\.\d+)", re.M)

_SHARDED_BF16 = """
    import json, sys
    import devicekit
    import torch

    sys.path.insert(0, sys.argv[1])
    from gpt_pretrain import TinyGPT, corpus, get_batch

    torch.manual_seed(0)
    model = devicekit.shard(TinyGPT())  # mixed_precision=None: the device's policy
    computed = set()
    model.head.register_forward_pre_hook(lambda module, args: computed.add(str(args[0].dtype)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data, losses = corpus(), []
    for it in range(30):
        x, y = get_batch(data, it, 0, 0, 1, 16, 1)
        loss = model(x.to(devicekit.device()), y.to(devicekit.device()))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        grads = {str(p.grad.dtype) for p in model.parameters()}
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    devicekit.save_checkpoint("ckpt", {"model": model, "optimizer": optimizer, "step": 30})
    devicekit.save_checkpoint("weights.pt", model)
    print(json.dumps({
        "devices": sorted({str(p.device) for p in model.parameters()}),
        "stored": sorted({str(p.dtype) for p in model.parameters()}),
        "computed": sorted(computed),
        "grads": sorted(grads),
        "losses": [losses[0], losses[-1]],
        "fingerprint": devicekit.fingerprint(model),
    }))
"""


def test_a_sharded_model_computes_in_bf16_and_its_checkpoints_load_without_a_gpu(tmp_path):
    """shard() on a bf16 GPU by default: fp32 shards and gradients, bf16 compute; it trains,
    and both its checkpoint folder and its full-weights file load here into a plain model
    with the weights it ended with."""
    if not torch.cuda.is_bf16_supported():
        pytest.skip("needs a GPU with bf16 (Ampere or later)")
    with Processes(tmp_path / "sharded") as procs:
        started = procs.start(
            "sharded",
            [PY, script(tmp_path, _SHARDED_BF16), str(GPT.parent)],
            gpu_env(CUDA_VISIBLE_DEVICES=one_gpu()),
            cwd=tmp_path,
        )
        [result] = procs.finish_all([started], RUN_TIMEOUT_S)
    ran = json.loads(succeeded(result).stdout)
    assert ran["devices"] == ["cuda:0"] and ran["stored"] == ran["grads"] == ["torch.float32"]
    assert ran["computed"] == ["torch.bfloat16"], ran
    first, last = ran["losses"]
    assert math.isfinite(last) and last < first / 2, ran

    sys.path.insert(0, str(GPT.parent))
    try:
        from gpt_pretrain import TinyGPT
    finally:
        sys.path.remove(str(GPT.parent))
    from_file = TinyGPT()
    from_file.load_state_dict(torch.load(tmp_path / "weights.pt", weights_only=True))
    from_folder = TinyGPT()
    values = devicekit.load_checkpoint(tmp_path / "ckpt", into={"model": from_folder})
    assert values == {"step": 30}
    fingerprint = ran["fingerprint"]
    assert devicekit.fingerprint(from_file) == devicekit.fingerprint(from_folder) == fingerprint


def test_a_sharded_gpt_has_ddps_losses_in_fp32_and_resumes_under_torchrun(tmp_path):
    """examples/gpt_pretrain.py, fp32: --strategy shard (4 iterations, a checkpoint folder,
    resumed under torchrun for 4 more) logs the losses of --strategy ddp's 8."""
    common = ["--no-amp", "--log-every", "1", "--batch-size", "8"]
    env = gpu_env(CUDA_VISIBLE_DEVICES=one_gpu(), DEVICEKIT_NPROC_PER_NODE=1)
    folder = tmp_path / "sharded"
    with Processes(tmp_path / "runs") as procs:
        ddp = procs.start(
            "ddp",
            [PY, str(GPT), *common, "--iters", "8", "--out", str(tmp_path / "ddp.pt")],
            env,
        )
        first = procs.start(
            "first",
            [
                PY,
                str(GPT),
                *common,
                "--strategy",
                "shard",
                "--iters",
                "4",
                "--save-every",
                "4",
                "--out",
                str(folder),
            ],
            env,
        )
        ddp, first = procs.finish_all([ddp, first], RUN_TIMEOUT_S)
    succeeded(ddp, first)
    args = [*common, "--strategy", "shard", "--iters", "8", "--resume", "--out", folder]
    resumed = succeeded(*launched(tmp_path, "torchrun", GPT, args, 1, env))
    reference = {int(it): float(loss) for it, loss in LOSS.findall(ddp.stdout)}
    sharded = {int(it): float(loss) for it, loss in LOSS.findall(first.stdout + resumed.stdout)}
    assert sorted(reference) == sorted(sharded) == list(range(8)), (ddp.stdout, sharded)
    for it, loss in sharded.items():
        assert loss == pytest.approx(reference[it], rel=1e-4), (it, sharded, reference)


_OUT_OF_MEMORY = """
    import devicekit
    import torch


    def main(local_rank):
        devicekit.init_distributed()
        torch.empty(1 << 40, dtype=torch.uint8, device=devicekit.device())  # 1 TiB


    if __name__ == "__main__":
        devicekit.launch(main)
"""


def test_running_out_of_gpu_memory_ends_with_one_line(tmp_path):
    """1 TiB asked of one GPU under devicekit.launch: torch's sizes in one line, the advice,
    exit code 2, no traceback."""
    env = gpu_env(CUDA_VISIBLE_DEVICES=one_gpu())
    [result] = launched(tmp_path, "python", script(tmp_path, _OUT_OF_MEMORY), [], 1, env)
    assert result.returncode == 2, describe([result])
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "Traceback" not in result.stderr and len(errors) == 1, describe([result])
    assert re.fullmatch(
        r"error: out of memory: CUDA out of memory\. Tried to allocate 1024\.00 GiB\. GPU 0 "
        r"has a total capacity of [\d.]+ GiB of which [\d.]+ [KMG]iB is free; use a smaller "
        r"batch, or split the model, its gradients and optimizer state across the ranks with "
        r"devicekit\.shard\(model\) \(activation_checkpointing=True saves more\)",
        errors[0],
    ), errors[0]

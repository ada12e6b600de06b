"""The stand-in npu device (DEVICEKIT_SIMULATE=npu): tensors that torch really places on a
device named `npu`, an `hccl` process group over them, and devicekit's npu kind on top.

Activating it renames torch's extension device for the life of the process, so every
scenario runs in a fresh interpreter and reports JSON. The first scenario of a machine
builds the C++ extension (about 20 s on 2 cores); the rest load it from the cache.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import clean_environ
from devicekit.errors import UsageError
from support.launchers import start
from support.paths import REPO, TESTS
from support.processes import Processes, describe
from support.runs import TINY, assert_bitwise_equal, load_checkpoint, run_training

FAKE_NPU = TESTS / "fake_npu"
USER_SCRIPT = TESTS / "npu_standin" / "user_script.py"
TIMEOUT_S = 300  # includes the first build of the extension
SIMULATE = {"DEVICEKIT_SIMULATE": "npu", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def run_python(args, timeout=TIMEOUT_S, **env):
    """`python ARGS` from the repo root with the stand-in asked for, plus `env`."""
    variables = clean_environ(**{**SIMULATE, **env})
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=variables,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def scenario(code, **env):
    """Run `code` after `import torch, devicekit` with the stand-in on; the dict it left in
    `out`, as JSON."""
    prelude = "import json, torch, devicekit\nfrom torch import nn\nout = {}\n"
    result = run_python(["-c", prelude + code + "\nprint(json.dumps(out))"], **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def error_line(result):
    """The one line a run that exited 2 printed on stderr."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


# -- a device torch dispatches to ---------------------------------------------------------------


def test_tensors_live_on_a_device_named_npu():
    out = scenario("""
a = torch.ones(3, device="npu")
b = torch.arange(6.).npu().view(2, 3)
c = b.to("npu:1")
m = nn.Linear(3, 2).npu()
out.update(
    device=str(torch.device("npu:0")), a=str(a.device), type=a.device.type, b=str(b.device),
    c=str(c.device), c_plus=str((c + c).device), module=str(m.weight.device),
    value=(b * 2 + 1).sum().item(), count=torch.npu.device_count(),
    accelerator=str(torch.accelerator.current_accelerator()),
    backend=torch.distributed.get_default_backend_for_device("npu"),
    back_on_cpu=(b.cpu() == torch.arange(6.).view(2, 3)).all().item())
""")
    assert out["device"] == "npu:0" and out["a"] == "npu:0" and out["type"] == "npu"
    assert out["b"] == "npu:0" and out["c"] == "npu:1" and out["c_plus"] == "npu:1"
    assert out["module"] == "npu:0" and out["value"] == 36.0 and out["back_on_cpu"] is True
    assert out["count"] == 2 and out["accelerator"] == "npu" and out["backend"] == "hccl"


@pytest.mark.parametrize(
    "env, count",
    [
        ({}, 2),
        ({"DEVICEKIT_SIMULATE_DEVICES": "8"}, 8),
        ({"DEVICEKIT_SIMULATE_DEVICES": "8", "ASCEND_RT_VISIBLE_DEVICES": "2,5,7"}, 3),
    ],
)
def test_device_count_follows_the_simulated_machine_and_visible_devices(env, count):
    out = scenario(
        """
out.update(torch=torch.npu.device_count(), kind=devicekit.device_count(),
           last=str(torch.ones(1, device=f"npu:{torch.npu.device_count() - 1}").device))
""",
        DEVICEKIT_DEVICE="npu",
        **env,
    )
    assert out == {"torch": count, "kind": count, "last": f"npu:{count - 1}"}


def test_the_npu_kind_runs_on_the_stand_in_unchanged():
    out = scenario(
        """
from devicekit.kinds.resolve import resolve_kind
from devicekit.environments import resolve_launch
kind = resolve_kind()
out.update(name=kind.name, backend=kind.backend, start_method=kind.start_method,
           count=kind.device_count(), ddp_device_ids=kind.ddp_device_ids(1),
           amp_dtype=str(kind.amp_dtype()), pin_memory=kind.pin_memory,
           device=str(devicekit.device()))
""",
        DEVICEKIT_SIMULATE_DEVICES="8",
        ASCEND_RT_VISIBLE_DEVICES="0,1",
    )
    assert out == {
        "name": "npu",
        "backend": "hccl",
        "start_method": "spawn",
        "count": 2,
        "ddp_device_ids": [1],
        "amp_dtype": "torch.float16",
        "pin_memory": True,
        "device": "npu:0",
    }


@pytest.mark.parametrize("local_rank, fits", [("1", True), ("2", False)])
def test_torchrun_local_rank_must_fit_the_visible_npus(local_rank, fits):
    out = scenario(
        """
from devicekit.kinds.resolve import resolve_kind
from devicekit.environments import resolve_launch
try:
    out["device_index"] = resolve_launch(kind=resolve_kind("npu")).device_index
except devicekit.UsageError as error:
    out["error"] = str(error)
""",
        RANK=local_rank,
        LOCAL_RANK=local_rank,
        WORLD_SIZE="4",
        LOCAL_WORLD_SIZE="4",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="29500",
        TORCHELASTIC_RUN_ID="test",
        DEVICEKIT_SIMULATE_DEVICES="8",
        ASCEND_RT_VISIBLE_DEVICES="0,1",
    )
    if fits:
        assert out == {"device_index": 1}
    else:
        assert "LOCAL_RANK" in out["error"] and "ASCEND_RT_VISIBLE_DEVICES" in out["error"], out


def test_doctor_says_where_torch_npu_comes_from():
    result = run_python(["-m", "devicekit", "doctor", "--json"])
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["device"], report["backend"], report["devices_per_node"]) == ("npu", "hccl", 2)
    assert report["torch_npu"]["state"] == "not installed, torch.npu registered"
    assert report["torch_npu"]["detail"].startswith(
        "torch.npu comes from devicekit.simulate.npu_module: "
    ), report["torch_npu"]
    assert report["problems"] == [] and result.stderr == ""


@pytest.mark.parametrize(
    "other, found",
    [
        ("torch.ones(4, 3)", "npu:0 and cpu"),
        ("torch.ones(4, 3, device='npu:1')", "npu:0 and npu:1"),
    ],
)
def test_an_operand_on_another_device_fails_as_on_a_real_npu(other, found):
    out = scenario(f"""
model = nn.Linear(3, 2).npu()
try:
    model({other})
except RuntimeError as error:
    out["error"] = str(error)
out["scalar_ok"] = str((torch.ones(2, device="npu") * torch.tensor(3.)).device)
""")
    assert "Expected all tensors to be on the same device" in out["error"], out
    assert found in out["error"], out
    assert out["scalar_ok"] == "npu:0"  # a CPU scalar is fine, as on CUDA


_MEMORY = """
import json, torch, devicekit
out = {}
a = torch.empty(1 << 20, dtype=torch.uint8, device="npu:1")  # 1 MiB
b = torch.ones(256, 1024, device="npu:1")  # 1 MiB more; ones fills in place
c = a[:10]  # a view: no memory of its own
out.update(on1=torch.npu.memory_allocated(1), on0=torch.npu.memory_allocated(0))
del a, b, c
out.update(freed=torch.npu.memory_allocated(1), peak=torch.npu.max_memory_allocated(1))
torch.npu.reset_peak_memory_stats(1)
out.update(reset=torch.npu.max_memory_allocated(1))
doubled = torch.ones(1024, device="npu:1") * 2  # a CPU kernel's fresh result, adopted
out.update(adopted=torch.npu.memory_allocated(1), stats=torch.npu.memory_stats(1))
torch.npu.set_device(1)
out.update(devicekit=[devicekit.memory_allocated(), devicekit.max_memory_allocated()])
try:
    torch.empty(8 << 20, dtype=torch.uint8, device="npu:0")
except torch.OutOfMemoryError as error:
    out.update(refused=str(error), after=torch.npu.memory_allocated(0))
print(json.dumps(out), flush=True)
torch.zeros(2 << 20, device="npu:0")  # 8 MiB again, uncaught: the user's one line
"""


def test_the_allocator_counts_bytes_and_refuses_past_the_simulated_capacity():
    """torch.npu's and devicekit's memory figures count the bytes of npu tensors per device
    (CPU kernels' results too); DEVICEKIT_SIMULATE_MEMORY caps each device, past which
    allocation raises torch's OutOfMemoryError in torch_npu's words, and a script that lets it
    escape ends with one line."""
    result = run_python(["-c", _MEMORY], DEVICEKIT_SIMULATE_MEMORY="4MiB")
    out = json.loads(result.stdout)
    mib = 1 << 20
    assert (out["on1"], out["on0"], out["freed"], out["peak"]) == (2 * mib, 0, 0, 2 * mib)
    assert (out["reset"], out["adopted"]) == (0, 4096), out
    assert out["stats"]["allocated_bytes.all.current"] == 4096, out
    assert out["devicekit"] == [4096, 8192], out  # the peak: the ones and their double
    assert out["refused"] == (
        "NPU out of memory. Tried to allocate 8.00 MiB (NPU 0; 4.00 MiB total capacity; "
        "0.00 KiB already allocated; 4.00 MiB free; the stand-in's capacity, "
        "DEVICEKIT_SIMULATE_MEMORY)"
    )
    assert out["after"] == 0
    assert error_line(result) == (
        "error: out of memory: NPU out of memory. Tried to allocate 8.00 MiB (NPU 0; 4.00 MiB "
        "total capacity; 0.00 KiB already allocated; 4.00 MiB free; the stand-in's capacity, "
        "DEVICEKIT_SIMULATE_MEMORY); use a smaller batch, or split the model, its gradients "
        "and optimizer state across the ranks with devicekit.shard(model) "
        "(activation_checkpointing=True saves more)"
    )


@pytest.mark.parametrize(
    "value, nbytes",
    [("512MiB", 512 << 20), ("1.5GB", 1_500_000_000), ("2 gib", 2 << 30), ("4096", 4096)],
)
def test_the_simulated_capacity_reads_sizes_as_people_write_them(value, nbytes):
    from devicekit.simulate import memory_capacity

    assert memory_capacity({"DEVICEKIT_SIMULATE_MEMORY": value}) == nbytes
    assert memory_capacity({}) == 0  # unset: no limit but the host's


@pytest.mark.parametrize("value", ["0", "lots", "1e9", "-1MiB", "512MiBs", "５12MiB", "0.1B"])
def test_a_capacity_that_is_no_size_is_refused(value):
    from devicekit.simulate import memory_capacity

    with pytest.raises(UsageError) as refused:
        memory_capacity({"DEVICEKIT_SIMULATE_MEMORY": value})
    assert str(refused.value) == (
        f"DEVICEKIT_SIMULATE_MEMORY={value!r} is not a memory size: write it as 512MiB, "
        "2GiB or a number of bytes, or unset it for no limit"
    )


_SPARSE = """
import json, torch, devicekit
from torch import nn
out = {}
bag = nn.EmbeddingBag(10, 4, sparse=True).npu()
try:
    bag(torch.tensor([[1, 2]], device="npu")).sum().backward()
except devicekit.UsageError as error:
    out["bag"] = str(error)
dense = nn.Embedding(10, 4).npu()
dense(torch.tensor([1, 2], device="npu")).sum().backward()
out["dense"] = [str(dense.weight.grad.layout), str(dense.weight.grad.device)]
print(json.dumps(out), flush=True)
table = nn.Embedding(10, 4, sparse=True).npu()
table(torch.tensor([1, 2], device="npu")).sum().backward()  # uncaught: the user's one line
"""
_NOT_SIMULATED = (
    "sparse tensors are not simulated by the npu stand-in "
    "(aten::_sparse_coo_tensor_with_dims_and_tensors makes one: a sparse gradient, as "
    "nn.Embedding and nn.EmbeddingBag give with sparse=True), and torch_npu 2.13.0 computes "
    "only add, mul, max and coalesce on them: use dense gradients (sparse=False)"
)


def test_sparse_gradients_are_refused_in_one_line_and_dense_ones_train():
    """Sparse tensors are not simulated (torch_npu computes almost nothing on them):
    EmbeddingBag's and Embedding's sparse gradients are refused naming the fix, whether
    the CPU kernel or torch's composite makes them; the dense gradient works."""
    result = run_python(["-c", _SPARSE])
    out = json.loads(result.stdout)
    assert out == {"bag": _NOT_SIMULATED, "dense": ["torch.strided", "npu:0"]}, out
    assert error_line(result) == f"error: {_NOT_SIMULATED}"


def test_training_on_npu_equals_training_on_cpu_bit_for_bit():
    out = scenario("""
import copy
torch.manual_seed(0)
cpu = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                    nn.Linear(8 * 6 * 6, 4))
npu = copy.deepcopy(cpu).npu()
initial = copy.deepcopy(cpu.state_dict())
runs = [(cpu, torch.optim.AdamW(cpu.parameters()), "cpu"),
        (npu, torch.optim.AdamW(npu.parameters()), "npu")]
x, y = torch.randn(5, 3, 8, 8), torch.randint(0, 4, (5,))
for _ in range(3):
    for model, optimizer, device in runs:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
        optimizer.step()
out["devices"] = sorted({str(p.device) for p in npu.parameters()})
out["equal"] = all(torch.equal(a.cpu(), b) for a, b in zip(npu.state_dict().values(),
                                                           cpu.state_dict().values()))
out["trained"] = not torch.equal(cpu[0].weight, initial["0.weight"])
""")
    assert out["devices"] == ["npu:0"]
    assert out["equal"] is True and out["trained"] is True


def test_a_script_that_ran_backward_on_npu_exits_cleanly_every_time():
    """The device's autograd thread must be done with Python before Python finalizes;
    without care about half of such runs aborted at exit."""
    code = (
        "import torch, devicekit\n"
        "torch.nn.Linear(3, 2).npu()(torch.randn(4, 3, device='npu')).sum().backward()\n"
        "print('done')"
    )
    for _ in range(6):
        result = run_python(["-c", code])
        assert (result.returncode, result.stdout.strip(), result.stderr) == (0, "done", ""), result


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_recurrent_layers_take_the_device_path_and_agree_with_the_cpu(cell):
    """Off the CPU, torch runs nn.LSTM/nn.GRU through fused cells the CPU has no kernel for."""
    out = scenario(f"""
import copy
torch.manual_seed(0)
cpu = nn.{cell}(3, 4, num_layers=2)
npu = copy.deepcopy(cpu).npu()
x = torch.randn(5, 2, 3)
a, b = cpu(x)[0], npu(x.npu())[0]
a.pow(2).sum().backward()
b.pow(2).sum().backward()
out["device"] = str(b.device)
out["output"] = (a - b.cpu()).abs().max().item()
out["grads"] = max((p.grad - q.grad.cpu()).abs().max().item()
                   for p, q in zip(cpu.parameters(), npu.parameters()))
""")
    assert out["device"] == "npu:0"
    assert out["output"] < 1e-6 and out["grads"] < 1e-6, out


def test_a_fused_cell_given_an_input_bias_without_its_hidden_bias_names_the_operator():
    """torch gives the fused cells both biases or neither; one given only the input bias
    is refused naming the operator."""
    out = scenario("""
gates, state, bias = torch.zeros(2, 8).npu(), torch.zeros(2, 2).npu(), torch.zeros(8).npu()
for name, width in (("_thnn_fused_lstm_cell", 8), ("_thnn_fused_gru_cell", 6)):
    try:
        getattr(torch.ops.aten, name)(gates[:, :width], gates[:, :width], state, bias[:width])
    except RuntimeError as error:
        out[name] = str(error)
""")
    for name in ("_thnn_fused_lstm_cell", "_thnn_fused_gru_cell"):
        assert f"aten::{name}: input_bias was given without hidden_bias" in out.get(name, ""), out


def test_autocast_for_npu_casts_and_autocast_for_cpu_silently_does_not():
    """The bug class `port` guards against: autocast opened for the wrong device type."""
    out = scenario("""
devicekit.runtime.kind("npu")
w = torch.randn(4, 4, device="npu")
with torch.autocast("cpu", dtype=torch.bfloat16):
    out["cpu_autocast"] = str((w @ w).dtype)
with torch.autocast("npu", dtype=torch.bfloat16):
    out["npu_autocast"] = str((w @ w).dtype)
with devicekit.autocast(enabled=True) as context:
    out["devicekit"] = [context.device, str((w @ w).dtype), str(torch.exp(w).dtype)]
with devicekit.autocast():
    out["default"] = torch.is_autocast_enabled("npu")
""")
    assert out["cpu_autocast"] == "torch.float32"
    assert out["npu_autocast"] == "torch.bfloat16"
    assert out["devicekit"] == ["npu", "torch.float16", "torch.float32"]
    assert out["default"] is False  # the NPU's default: off, as Ascend's scripts do


def test_grad_scaler_scales_steps_and_updates_on_npu():
    out = scenario("""
devicekit.runtime.kind("npu")
model = nn.Linear(8, 2).npu()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = devicekit.GradScaler(enabled=True, init_scale=1024.0, growth_interval=1)
static = devicekit.GradScaler(enabled=True, init_scale=1024.0, dynamic=False)
before = model.weight.detach().cpu().clone()
for s in (scaler, static):
    with devicekit.autocast(enabled=True):
        loss = model(torch.randn(4, 8, device="npu")).float().pow(2).mean()
    optimizer.zero_grad()
    s.scale(loss).backward()
    s.step(optimizer)
    s.update()
out.update(cls=type(scaler).__module__ + "." + type(scaler).__name__,
           dynamic=scaler.get_scale(), static=static.get_scale(),
           stepped=not torch.equal(before, model.weight.detach().cpu()))
""")
    assert out["cls"] == "torch.npu.amp.GradScaler" or out["cls"].endswith(".GradScaler"), out
    assert out["dynamic"] == 2048.0  # grew after one finite step (growth_interval=1)
    assert out["static"] == 1024.0  # dynamic=False: torch_npu's static loss scale
    assert out["stepped"] is True


def test_checkpoints_move_between_npu_and_cpu(tmp_path):
    out = scenario(f"""
model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).to("npu:1")
path = {str(tmp_path / "ckpt.pt")!r}
devicekit.save_checkpoint(path, {{"model": model}})
plain = torch.load(path, weights_only=True)["model"]
out["saved_from"] = sorted({{str(t.device) for t in plain.values()}})
for where in ("npu:1", "npu", "cpu"):
    loaded = devicekit.load_checkpoint(path, map_location=where)["model"]
    out[where] = sorted({{str(t.device) for t in loaded.values()}})
    out[where + " equal"] = all(torch.equal(loaded[k].cpu(), plain[k].cpu()) for k in plain)
fresh = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).npu()
fresh.load_state_dict(torch.load(path, map_location="npu", weights_only=True)["model"])
out["into_model"] = str(fresh[0].weight.device)
""")
    assert out["saved_from"] == ["cpu"]  # devicekit saves portable checkpoints
    assert (out["npu:1"], out["npu"], out["cpu"]) == (["npu:1"], ["npu:0"], ["cpu"])
    assert out["npu:1 equal"] and out["npu equal"] and out["cpu equal"]
    assert out["into_model"] == "npu:0"


def test_init_distributed_binds_the_npu_and_joins_an_hccl_group():
    out = scenario(
        """
ctx = devicekit.init_distributed(options=devicekit.LaunchOptions(gpu=1))
t = torch.ones(2, device=devicekit.device())
torch.distributed.all_reduce(t)
out.update(index=ctx.device_index, backend=torch.distributed.get_backend(),
           device=str(devicekit.device()), current=torch.npu.current_device(),
           result=t.tolist(), result_device=str(t.device))
devicekit.destroy_process_group()
""",
        DEVICEKIT_DEVICE="npu",
    )
    assert out["index"] == 1 and out["current"] == 1 and out["device"] == "npu:1"
    assert out["backend"] == "hccl"
    assert out["result"] == [1.0, 1.0] and out["result_device"] == "npu:1"


# -- collectives, the trainer and a user's script on 2 ranks -----------------------------------


@pytest.mark.slow
def test_check_passes_on_npu_over_hccl_with_two_ranks():
    result = run_python(
        ["-m", "devicekit", "check", "--device", "npu", "--max-bytes", str(1 << 20), "--json"]
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True, report
    assert (report["backend"], report["device"], report["world_size"]) == ("hccl", "npu", 2)
    assert sorted(r["device"] for r in report["ranks"]) == ["npu:0", "npu:1"], report


DEVICE_LIST_SCRIPT = """
import devicekit
from devicekit import LaunchOptions

def main(local_rank):
    devicekit.init_distributed()
    print(f"rank {devicekit.rank()} of {devicekit.world_size()} on {devicekit.device()}")
    devicekit.destroy_process_group()

if __name__ == "__main__":
    options = LaunchOptions(multiprocessing_distributed=True, device_list=(1, 3))
    print("ranks per node", devicekit.nprocs_per_node(options=options))
    devicekit.launch(main, options=options)
"""


@pytest.mark.slow
def test_a_device_list_alone_says_how_many_ranks_to_start_and_where(tmp_path):
    # --device-list 1,3 without --nproc-per-node: two ranks, on npu:1 and npu:3 (it used
    # to start one per visible device and then refuse the count it had chosen itself)
    script = tmp_path / "device_list.py"
    script.write_text(DEVICE_LIST_SCRIPT)
    result = run_python([script], DEVICEKIT_SIMULATE_DEVICES="4", DEVICEKIT_DEVICE="npu")
    assert result.returncode == 0, result.stderr
    lines = sorted(result.stdout.splitlines())
    assert lines == ["rank 0 of 2 on npu:1", "rank 1 of 2 on npu:3", "ranks per node 2"], lines


@pytest.fixture(scope="module")
def cpu_reference(tmp_path_factory):
    """The TINY run on the CPU in fp32 (the npu runs compute with the same kernels)."""
    directory = tmp_path_factory.mktemp("cpu")
    run_training(
        "torchrun",
        [*TINY, "--no-amp", "--no-channels-last", "--output-dir", directory / "out"],
        directory,
    )
    return load_checkpoint(directory / "out")


# The three ways a rank finds its NPU: LOCAL_RANK (torchrun; torch.distributed.launch and
# run_8p.sh export it the same way, and test_train_runs runs them on the CPU), the index
# launch() gives a spawned rank, and Ascend's RANK_ID.
NPU_LAUNCHERS = ["torchrun", "spawn", "ascend"]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", NPU_LAUNCHERS)
def test_main_trains_on_npu_and_matches_the_cpu_bit_for_bit(launcher, cpu_reference, tmp_path):
    results = run_training(
        launcher,
        [*TINY, "--device", "npu", "--output-dir", tmp_path / "out"],
        tmp_path,
        DEVICEKIT_SIMULATE="npu",
        DEVICEKIT_DEVICE="auto",
    )
    stdout = results[0].stdout
    assert stdout.startswith("=> tinynet on npu ("), stdout
    assert ", fp32" in stdout.splitlines()[0], stdout
    warnings = [
        line for r in results for line in (r.stdout + r.stderr).splitlines() if "Warning" in line
    ]
    assert not warnings, describe(results)
    checkpoint = load_checkpoint(tmp_path / "out")
    assert_bitwise_equal(
        checkpoint["state_dict"],
        cpu_reference["state_dict"],
        f"{launcher} on npu against torchrun on cpu",
    )


@pytest.mark.slow
def test_a_users_flat_api_script_keeps_every_tensor_on_npu_under_torchrun(tmp_path):
    args, env = [tmp_path / "ckpt.pt"], clean_environ(**SIMULATE)
    with Processes(tmp_path / "processes") as procs:
        run = start(procs, "torchrun", USER_SCRIPT, args, 2, tmp_path, env=env)
        (result,) = procs.finish_all(run, TIMEOUT_S)
    assert result.returncode == 0, describe([result])
    reports = sorted(
        (json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")),
        key=lambda r: r["rank"],
    )
    assert [r["rank"] for r in reports] == [0, 1], describe([result])
    for rank, report in enumerate(reports):
        assert report["device"] == f"npu:{rank}"
        assert report["backend"] == report["process_group"] == "hccl"
        assert report["devices"] == [f"npu:{rank}"], report
        assert report["autocast_dtypes"] == ["torch.float16"], report
        assert report["scaler"] == "GradScaler" and report["scale"] > 1.0, report
        assert report["loaded_on"] == [f"npu:{rank}"] and report["loaded_on_cpu"] == ["cpu"]
        assert report["same_values"] is True
    assert reports[0]["weights"] == reports[1]["weights"], "DDP ranks diverged"
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert {t.device.type for t in saved["model"].values()} == {"cpu"}


# -- bad input: one line, exit 2 -----------------------------------------------------------------


@pytest.mark.parametrize("value", ["tpu", "cuda", "npu,cpu"])
def test_an_unknown_simulated_device_is_refused_in_one_line(value):
    line = error_line(run_python(["-c", "import devicekit"], DEVICEKIT_SIMULATE=value))
    assert line == (
        f"error: DEVICEKIT_SIMULATE={value!r} is not a device devicekit can "
        "simulate: use npu, or unset it"
    )


@pytest.mark.parametrize(
    "env, says",
    [
        ({"DEVICEKIT_SIMULATE_DEVICES": "0"}, "DEVICEKIT_SIMULATE_DEVICES='0' must be a whole"),
        ({"DEVICEKIT_SIMULATE_DEVICES": "two"}, "DEVICEKIT_SIMULATE_DEVICES='two' must be a whole"),
        (
            {"ASCEND_RT_VISIBLE_DEVICES": "0,5"},
            "ASCEND_RT_VISIBLE_DEVICES='0,5' names NPU 5, but this machine has 2",
        ),
        ({"DEVICEKIT_SIMULATE_MEMORY": "lots"}, "DEVICEKIT_SIMULATE_MEMORY='lots' is not a"),
    ],
)
def test_a_bad_simulated_machine_is_refused_in_one_line(env, says):
    line = error_line(run_python(["-m", "devicekit", "doctor"], **env))
    assert says in line, line


def test_an_unordered_visible_list_is_refused_by_the_npu_kind():
    line = error_line(
        run_python(["-m", "devicekit", "check", "--device", "npu"], ASCEND_RT_VISIBLE_DEVICES="1,0")
    )
    assert "ASCEND_RT_VISIBLE_DEVICES='1,0' is not in ascending order" in line, line


def test_a_real_torch_npu_beside_the_stand_in_is_refused():
    env = clean_environ(**SIMULATE)
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_NPU), env["PYTHONPATH"]])
    result = subprocess.run(
        [sys.executable, "-c", "import devicekit"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    line = error_line(result)
    assert "torch_npu is installed here" in line and "unset DEVICEKIT_SIMULATE" in line, line


def test_no_compiler_is_one_line_and_leaves_nothing_behind(tmp_path):
    cache = tmp_path / "cache"
    line = error_line(
        run_python(["-c", "import devicekit"], DEVICEKIT_CACHE=cache, CXX="no-such-compiler")
    )
    assert "needs a C++ compiler ('no-such-compiler' is not on PATH)" in line, line
    assert "apt-get install g++" in line, line
    assert not cache.exists(), list(cache.iterdir())


@pytest.mark.slow
def test_two_processes_building_at_once_both_start_and_leave_one_build(tmp_path):
    """The first start on a machine builds; ranks starting together wait for that build."""
    cache = tmp_path / "cache"
    code = "import torch, devicekit; print(torch.ones(1, device='npu').device)"
    with Processes(tmp_path / "processes") as procs:
        started = [
            procs.start(
                f"p{i}",
                [sys.executable, "-c", code],
                clean_environ(**SIMULATE, DEVICEKIT_CACHE=cache),
            )
            for i in range(2)
        ]
        results = procs.finish_all(started, TIMEOUT_S)
    assert [r.returncode for r in results] == [0, 0], describe(results)
    assert [r.stdout.strip() for r in results] == ["npu:0", "npu:0"]
    built, lock = sorted(p.name for p in cache.iterdir())
    assert built.startswith("npu-standin-") and lock == "npu-standin.lock"


def test_profile_records_the_host_where_torch_npu_is_absent(tmp_path):
    """The stand-in registers torch.npu without torch_npu, whose profiler sees the NPU:
    devicekit.profile still works, with torch.profiler recording the host."""
    out = scenario(f"""
import glob
with devicekit.profile({str(tmp_path)!r}, wait=0, warmup=1, active=2) as prof:
    for _ in range(3):
        (torch.ones(64, 64, device="npu") @ torch.ones(64, 64, device="npu")).sum()
        prof.step()
[trace] = glob.glob({str(tmp_path)!r} + "/*.pt.trace.json")
out["names"] = sorted({{e.get("name") for e in json.load(open(trace))["traceEvents"]}} - {{None}})
""")
    assert "aten::mm" in out["names"]

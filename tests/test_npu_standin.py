"""The stand-in npu device (DEVICEKIT_SIMULATE=npu): tensors that torch really places on a
device named `npu`, an `hccl` process group over them, and devicekit's npu kind on top.

Activating it renames torch's extension device for the life of the process, so the
scenarios run outside the test process: those of one simulated machine (device count,
visible devices) in one process each (support/scenario_process.py: every scenario starts as
a new process would, with its variables and a devicekit that knows nothing yet), the
refusals at start in one more that imports devicekit afresh for each, and what only a
process shows (an error that escapes a script, a launch) in processes of their own. They
report JSON.

The first start on a machine builds the C++ extension (about 20 s on 2 cores): the module's
first fixture, two processes at once, builds it in the cache every other test reads, where
that cache has no build yet; the rest load it.
"""

import json
import os
import re
import sys
from unittest import mock

import pytest
import torch

from conftest import clean_environ
from devicekit.errors import UsageError
from support.launchers import MAIN, start
from support.paths import TESTS
from support.processes import Processes, describe
from support.runs import TINY, assert_bitwise_equal, load_checkpoint, succeeded
from support.scenario_process import Scenario, outcome, result, start_batch

FAKE_NPU = TESTS / "fake_npu"
USER_SCRIPT = TESTS / "npu_standin" / "user_script.py"
TIMEOUT_S = 300  # includes the first build of the extension
SIMULATE = {"DEVICEKIT_SIMULATE": "npu", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

# Each process that ran backward on npu ends this way (see
# test_a_script_that_ran_backward_on_npu_exits_cleanly_every_time).
BACKWARD = "torch.nn.Linear(3, 2).npu()(torch.randn(4, 3, device='npu')).sum().backward()\n"


def python(code):
    """`python -c CODE`."""
    return [sys.executable, "-c", code]


def error_line(returncode, stderr):
    """The one line a run that exited 2 printed on stderr."""
    assert returncode == 2, (returncode, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def scenario_error_line(found):
    """The one line a scenario that exited 2 printed on stderr."""
    return error_line(found["exit"], found["stderr"])


def process_error_line(finished):
    """The one line a process that exited 2 printed on stderr."""
    return error_line(finished.returncode, finished.stderr)


# -- the first build ----------------------------------------------------------------------------


def _default_cache():
    """The stand-in's cache every test's process uses (no DEVICEKIT_CACHE: clean_environ
    drops it)."""
    from devicekit.simulate import build

    with mock.patch.dict(os.environ):
        os.environ.pop(build.CACHE_ENV, None)
        return build.cache_root()


def _has_a_build(root):
    return any(not p.name.startswith("npu-standin-build.") for p in root.glob("npu-standin-*/"))


@pytest.fixture(scope="module", autouse=True)
def first_build(tmp_path_factory):
    """(the two processes' Finished, their cache): two processes started at once with no
    build in their cache, each running backward on npu:0. The cache is the one the other
    tests use when it has no build yet (CI's is empty: the suite builds once, here), else a
    fresh folder."""
    folder = tmp_path_factory.mktemp("first_build")
    cache = _default_cache()
    env = clean_environ(**SIMULATE)
    if _has_a_build(cache):
        cache = folder / "cache"
        env["DEVICEKIT_CACHE"] = str(cache)
    code = f"import torch, devicekit\n{BACKWARD}print(torch.ones(1, device='npu').device)"
    with Processes(folder / "processes") as procs:
        started = [procs.start(f"p{i}", python(code), env) for i in range(2)]
        return procs.finish_all(started, TIMEOUT_S), cache


@pytest.mark.slow
@pytest.mark.first_build
def test_two_processes_building_at_once_both_start_and_leave_one_build(first_build):
    """The first start on a machine builds; ranks starting together wait for that build."""
    results, cache = first_build
    assert [r.returncode for r in results] == [0, 0], describe(results)
    assert [r.stdout.strip() for r in results] == ["npu:0", "npu:0"]
    built, lock = sorted(p.name for p in cache.iterdir() if p.name.startswith("npu-standin"))
    assert built.startswith("npu-standin-") and lock == "npu-standin.lock"


# -- the scenarios ------------------------------------------------------------------------------

_PRELUDE = "import json, sys, torch, devicekit\nfrom torch import nn\n"
_EPILOGUE = BACKWARD + "print('done')\n"
_COMMAND = "import runpy\nrunpy.run_module('devicekit', run_name='__main__', alter_sys=True)\n"
_FRESH_DEVICEKIT = """
import sys
for name in [m for m in sys.modules if m == "devicekit" or m.startswith("devicekit.")]:
    del sys.modules[name]
"""

_TENSORS = """
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
"""
_COUNT = """
out.update(torch=torch.npu.device_count(), kind=devicekit.device_count(),
           last=str(torch.ones(1, device=f"npu:{torch.npu.device_count() - 1}").device))
"""
_KIND = """
from devicekit.kinds.resolve import resolve_kind
kind = resolve_kind()
out.update(name=kind.name, backend=kind.backend, start_method=kind.start_method,
           count=kind.device_count(), ddp_device_ids=kind.ddp_device_ids(1),
           amp_dtype=str(kind.amp_dtype()), pin_memory=kind.pin_memory,
           device=str(devicekit.device()))
"""
_LOCAL_RANK = """
from devicekit.kinds.resolve import resolve_kind
from devicekit.environments import resolve_launch
try:
    out["device_index"] = resolve_launch(kind=resolve_kind("npu")).device_index
except devicekit.UsageError as error:
    out["error"] = str(error)
"""


def _operand(other):
    return f"""
model = nn.Linear(3, 2).npu()
try:
    model({other})
except RuntimeError as error:
    out["error"] = str(error)
out["scalar_ok"] = str((torch.ones(2, device="npu") * torch.tensor(3.)).device)
"""


_TRAINING = """
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
"""
_RECURRENT = """
import copy
torch.manual_seed(0)
cpu = getattr(nn, sys.argv[1])(3, 4, num_layers=2)
npu = copy.deepcopy(cpu).npu()
x = torch.randn(5, 2, 3)
a, b = cpu(x)[0], npu(x.npu())[0]
a.pow(2).sum().backward()
b.pow(2).sum().backward()
out["device"] = str(b.device)
out["output"] = (a - b.cpu()).abs().max().item()
out["grads"] = max((p.grad - q.grad.cpu()).abs().max().item()
                   for p, q in zip(cpu.parameters(), npu.parameters()))
"""
_FUSED_CELL = """
gates, state, bias = torch.zeros(2, 8).npu(), torch.zeros(2, 2).npu(), torch.zeros(8).npu()
for name, width in (("_thnn_fused_lstm_cell", 8), ("_thnn_fused_gru_cell", 6)):
    try:
        getattr(torch.ops.aten, name)(gates[:, :width], gates[:, :width], state, bias[:width])
    except RuntimeError as error:
        out[name] = str(error)
"""
_AUTOCAST = """
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
"""
_GRAD_SCALER = """
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
"""
_CHECKPOINTS = """
model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).to("npu:1")
path = sys.argv[1]
devicekit.save_checkpoint(path, {"model": model})
plain = torch.load(path, weights_only=True)["model"]
out["saved_from"] = sorted({str(t.device) for t in plain.values()})
for where in ("npu:1", "npu", "cpu"):
    loaded = devicekit.load_checkpoint(path, map_location=where)["model"]
    out[where] = sorted({str(t.device) for t in loaded.values()})
    out[where + " equal"] = all(torch.equal(loaded[k].cpu(), plain[k].cpu()) for k in plain)
fresh = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).npu()
fresh.load_state_dict(torch.load(path, map_location="npu", weights_only=True)["model"])
out["into_model"] = str(fresh[0].weight.device)
"""
_INIT_DISTRIBUTED = """
ctx = devicekit.init_distributed(options=devicekit.LaunchOptions(gpu=1))
t = torch.ones(2, device=devicekit.device())
torch.distributed.all_reduce(t)
out.update(index=ctx.device_index, backend=torch.distributed.get_backend(),
           device=str(devicekit.device()), current=torch.npu.current_device(),
           result=t.tolist(), result_device=str(t.device))
devicekit.destroy_process_group()
"""
_PROFILE = """
import glob
with devicekit.profile(sys.argv[1], wait=0, warmup=1, active=2) as prof:
    for _ in range(3):
        (torch.ones(64, 64, device="npu") @ torch.ones(64, 64, device="npu")).sum()
        prof.step()
[trace] = glob.glob(sys.argv[1] + "/*.pt.trace.json")
out["names"] = sorted({e.get("name") for e in json.load(open(trace))["traceEvents"]} - {None})
"""

OPERANDS = {
    "torch.ones(4, 3)": "npu:0 and cpu",
    "torch.ones(4, 3, device='npu:1')": "npu:0 and npu:1",
}
# A launcher's view of rank LOCAL_RANK of 4, on a machine of 8 with two visible.
_TORCHRUN = {
    "WORLD_SIZE": "4",
    "LOCAL_WORLD_SIZE": "4",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
    "TORCHELASTIC_RUN_ID": "test",
}
DEVICE_COUNTS = [
    ({}, 2),
    ({"DEVICEKIT_SIMULATE_DEVICES": "8"}, 8),
    ({"DEVICEKIT_SIMULATE_DEVICES": "8", "ASCEND_RT_VISIBLE_DEVICES": "2,5,7"}, 3),
]
UNKNOWN_DEVICES = ["tpu", "cuda", "npu,cpu"]
BAD_MACHINES = [
    ({"DEVICEKIT_SIMULATE_DEVICES": "0"}, "DEVICEKIT_SIMULATE_DEVICES='0' must be a whole"),
    ({"DEVICEKIT_SIMULATE_DEVICES": "two"}, "DEVICEKIT_SIMULATE_DEVICES='two' must be a whole"),
    (
        {"ASCEND_RT_VISIBLE_DEVICES": "0,5"},
        "ASCEND_RT_VISIBLE_DEVICES='0,5' names NPU 5, but this machine has 2",
    ),
    ({"DEVICEKIT_SIMULATE_MEMORY": "lots"}, "DEVICEKIT_SIMULATE_MEMORY='lots' is not a"),
]


def _machines(folder):
    """{process name: (its machine's variables, its scenarios)}: one process per simulated
    machine, ending with a backward on npu (the machine of 8 with all visible is the
    refusals' process's last start)."""
    npu = {"DEVICEKIT_DEVICE": "npu"}
    return {
        "two": (
            {},
            [
                Scenario("tensors", _TENSORS),
                Scenario("count 0", _COUNT, npu),
                *(Scenario(f"operand {o}", _operand(o)) for o in OPERANDS),
                Scenario("training", _TRAINING),
                *(Scenario(cell, _RECURRENT, {}, (cell,)) for cell in ("LSTM", "GRU")),
                Scenario("fused cell", _FUSED_CELL),
                Scenario("autocast", _AUTOCAST),
                Scenario("grad scaler", _GRAD_SCALER),
                Scenario("checkpoints", _CHECKPOINTS, {}, (folder / "ckpt.pt",)),
                Scenario("init distributed", _INIT_DISTRIBUTED, npu),
                Scenario("profile", _PROFILE, {}, (folder / "trace",)),
                Scenario("doctor", _COMMAND, {}, ("doctor", "--json")),
                Scenario(
                    "unordered",
                    _COMMAND,
                    {"ASCEND_RT_VISIBLE_DEVICES": "1,0"},
                    ("check", "--device", "npu"),
                ),
            ],
        ),
        "eight, two visible": (
            {"DEVICEKIT_SIMULATE_DEVICES": "8", "ASCEND_RT_VISIBLE_DEVICES": "0,1"},
            [
                Scenario("kind", _KIND),
                *(
                    Scenario(
                        f"local rank {r}", _LOCAL_RANK, {**_TORCHRUN, "RANK": r, "LOCAL_RANK": r}
                    )
                    for r in ("1", "2")
                ),
            ],
        ),
        "eight, three visible": (DEVICE_COUNTS[2][0], [Scenario("count 2", _COUNT, npu)]),
    }


def _refusals(folder):
    """The starts refused before the stand-in is active, each importing devicekit afresh
    (`python -c "import devicekit"`, `python -m devicekit doctor`); then the one that renames
    torch's device before it fails (no compiler); last a start that succeeds, on a machine
    of 8 (the process's one activation: the npu device cannot be registered twice)."""
    importing = _FRESH_DEVICEKIT + "import devicekit\n"
    doctor = _FRESH_DEVICEKIT + _COMMAND
    with_fake = (
        _FRESH_DEVICEKIT
        + f"sys.path.insert(0, {str(FAKE_NPU)!r})\n"
        + f"try:\n    import devicekit\nfinally:\n    sys.path.remove({str(FAKE_NPU)!r})\n"
    )
    no_compiler = {"DEVICEKIT_CACHE": folder / "cache", "CXX": "no-such-compiler"}
    return [
        *(Scenario(f"simulate {v}", importing, {"DEVICEKIT_SIMULATE": v}) for v in UNKNOWN_DEVICES),
        *(
            Scenario(f"machine {i}", doctor, env, ("doctor",))
            for i, (env, _) in enumerate(BAD_MACHINES)
        ),
        Scenario("real torch_npu", with_fake),
        Scenario("no compiler", importing, no_compiler),
        Scenario("count 1", importing + _COUNT, {**DEVICE_COUNTS[1][0], "DEVICEKIT_DEVICE": "npu"}),
    ]


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


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """Everything but the launches, started at once: {"scenarios": {scenario: what it left},
    "processes": {name: Finished}, "folder": their folder}. The processes: one per simulated
    machine (its scenarios, then a backward on npu), the refusals at start, a script that
    runs out of memory and one that makes a sparse gradient."""
    folder = tmp_path_factory.mktemp("standin")
    base = clean_environ(**SIMULATE)
    with Processes(folder / "processes") as procs:
        batches = {
            name: start_batch(procs, name, scenarios, {**base, **env}, folder, _PRELUDE, _EPILOGUE)
            for name, (env, scenarios) in _machines(folder).items()
        }
        batches["refusals"] = start_batch(
            procs, "refusals", _refusals(folder), base, folder, "import sys, torch\n", _EPILOGUE
        )
        started = {name: batch.process for name, batch in batches.items()}
        started["memory"] = procs.start(
            "memory", python(_MEMORY), {**base, "DEVICEKIT_SIMULATE_MEMORY": "4MiB"}
        )
        started["sparse"] = procs.start("sparse", python(_SPARSE), base)
        finished = procs.finish_all(list(started.values()), TIMEOUT_S)
    scenarios = {}
    for batch in batches.values():
        scenarios.update(batch.results())
    return {
        "scenarios": scenarios,
        "processes": dict(zip(started, finished, strict=True)),
        "folder": folder,
    }


def scenario_out(ran, name):
    return outcome(ran["scenarios"], name)


# -- a device torch dispatches to ---------------------------------------------------------------


def test_tensors_live_on_a_device_named_npu(ran):
    out = scenario_out(ran, "tensors")
    assert out["device"] == "npu:0" and out["a"] == "npu:0" and out["type"] == "npu"
    assert out["b"] == "npu:0" and out["c"] == "npu:1" and out["c_plus"] == "npu:1"
    assert out["module"] == "npu:0" and out["value"] == 36.0 and out["back_on_cpu"] is True
    assert out["count"] == 2 and out["accelerator"] == "npu" and out["backend"] == "hccl"


@pytest.mark.parametrize("case, env, count", [(i, *c) for i, c in enumerate(DEVICE_COUNTS)])
def test_device_count_follows_the_simulated_machine_and_visible_devices(ran, case, env, count):
    out = scenario_out(ran, f"count {case}")
    assert out == {"torch": count, "kind": count, "last": f"npu:{count - 1}"}, env


def test_the_npu_kind_runs_on_the_stand_in_unchanged(ran):
    assert scenario_out(ran, "kind") == {
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
def test_torchrun_local_rank_must_fit_the_visible_npus(ran, local_rank, fits):
    out = scenario_out(ran, f"local rank {local_rank}")
    if fits:
        assert out == {"device_index": 1}
    else:
        assert "LOCAL_RANK" in out["error"] and "ASCEND_RT_VISIBLE_DEVICES" in out["error"], out


def test_doctor_says_where_torch_npu_comes_from(ran):
    found = result(ran["scenarios"], "doctor")
    assert found["exit"] == 0, found
    report = json.loads(found["stdout"])
    assert (report["device"], report["backend"], report["devices_per_node"]) == ("npu", "hccl", 2)
    assert report["torch_npu"]["state"] == "not installed, torch.npu registered"
    assert report["torch_npu"]["detail"].startswith(
        "torch.npu comes from devicekit.simulate.npu_module: "
    ), report["torch_npu"]
    assert report["problems"] == [] and found["stderr"] == ""


@pytest.mark.parametrize("other, found", OPERANDS.items())
def test_an_operand_on_another_device_fails_as_on_a_real_npu(ran, other, found):
    out = scenario_out(ran, f"operand {other}")
    assert "Expected all tensors to be on the same device" in out["error"], out
    assert found in out["error"], out
    assert out["scalar_ok"] == "npu:0"  # a CPU scalar is fine, as on CUDA


def test_the_allocator_counts_bytes_and_refuses_past_the_simulated_capacity(ran):
    """torch.npu's and devicekit's memory figures count the bytes of npu tensors per device
    (CPU kernels' results too); DEVICEKIT_SIMULATE_MEMORY caps each device, past which
    allocation raises torch's OutOfMemoryError in torch_npu's words, and a script that lets it
    escape ends with one line."""
    finished = ran["processes"]["memory"]
    out = json.loads(finished.stdout)
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
    assert process_error_line(finished) == (
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


_NOT_SIMULATED = (
    "sparse tensors are not simulated by the npu stand-in "
    "(aten::_sparse_coo_tensor_with_dims_and_tensors makes one: a sparse gradient, as "
    "nn.Embedding and nn.EmbeddingBag give with sparse=True), and torch_npu 2.13.0 computes "
    "only add, mul, max and coalesce on them: use dense gradients (sparse=False)"
)


def test_sparse_gradients_are_refused_in_one_line_and_dense_ones_train(ran):
    """Sparse tensors are not simulated (torch_npu computes almost nothing on them):
    EmbeddingBag's and Embedding's sparse gradients are refused naming the fix, whether
    the CPU kernel or torch's composite makes them; the dense gradient works."""
    finished = ran["processes"]["sparse"]
    out = json.loads(finished.stdout)
    assert out == {"bag": _NOT_SIMULATED, "dense": ["torch.strided", "npu:0"]}, out
    assert process_error_line(finished) == f"error: {_NOT_SIMULATED}"


def test_training_on_npu_equals_training_on_cpu_bit_for_bit(ran):
    out = scenario_out(ran, "training")
    assert out["devices"] == ["npu:0"]
    assert out["equal"] is True and out["trained"] is True


# What torch's profiler (kineto) writes on stderr by itself when a profile starts and stops.
PROFILER_NOTE = re.compile(r"USDT:.* SyncActivityProfilerHandler\.cpp:\d+\] profiler_(start|stop)")


def test_a_script_that_ran_backward_on_npu_exits_cleanly_every_time(first_build, ran):
    """The device's autograd thread must be done with Python before Python finalizes;
    without care about half of such runs aborted at exit. Six processes ran backward on npu
    last: the two of the first build, the three simulated machines' and the refusals' (whose
    stderr holds nothing but the profiler's own notes of the profile scenario)."""
    builds, _ = first_build
    for finished in builds:
        assert (finished.returncode, finished.stderr) == (0, ""), describe([finished])
    for name in [*_machines(ran["folder"]), "refusals"]:
        finished = ran["processes"][name]
        stderr = [
            line for line in finished.stderr.splitlines() if not PROFILER_NOTE.fullmatch(line)
        ]
        assert (finished.returncode, finished.stdout.strip(), stderr) == (0, "done", []), (
            name,
            describe([finished]),
        )


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_recurrent_layers_take_the_device_path_and_agree_with_the_cpu(ran, cell):
    """Off the CPU, torch runs nn.LSTM/nn.GRU through fused cells the CPU has no kernel for."""
    out = scenario_out(ran, cell)
    assert out["device"] == "npu:0"
    assert out["output"] < 1e-6 and out["grads"] < 1e-6, out


def test_a_fused_cell_given_an_input_bias_without_its_hidden_bias_names_the_operator(ran):
    """torch gives the fused cells both biases or neither; one given only the input bias
    is refused naming the operator."""
    out = scenario_out(ran, "fused cell")
    for name in ("_thnn_fused_lstm_cell", "_thnn_fused_gru_cell"):
        assert f"aten::{name}: input_bias was given without hidden_bias" in out.get(name, ""), out


def test_autocast_for_npu_casts_and_autocast_for_cpu_silently_does_not(ran):
    """The bug class `port` guards against: autocast opened for the wrong device type."""
    out = scenario_out(ran, "autocast")
    assert out["cpu_autocast"] == "torch.float32"
    assert out["npu_autocast"] == "torch.bfloat16"
    assert out["devicekit"] == ["npu", "torch.float16", "torch.float32"]
    assert out["default"] is False  # the NPU's default: off, as Ascend's scripts do


def test_grad_scaler_scales_steps_and_updates_on_npu(ran):
    out = scenario_out(ran, "grad scaler")
    assert out["cls"] == "torch.npu.amp.GradScaler" or out["cls"].endswith(".GradScaler"), out
    assert out["dynamic"] == 2048.0  # grew after one finite step (growth_interval=1)
    assert out["static"] == 1024.0  # dynamic=False: torch_npu's static loss scale
    assert out["stepped"] is True


def test_checkpoints_move_between_npu_and_cpu(ran):
    out = scenario_out(ran, "checkpoints")
    assert out["saved_from"] == ["cpu"]  # devicekit saves portable checkpoints
    assert (out["npu:1"], out["npu"], out["cpu"]) == (["npu:1"], ["npu:0"], ["cpu"])
    assert out["npu:1 equal"] and out["npu equal"] and out["cpu equal"]
    assert out["into_model"] == "npu:0"


def test_init_distributed_binds_the_npu_and_joins_an_hccl_group(ran):
    out = scenario_out(ran, "init distributed")
    assert out["index"] == 1 and out["current"] == 1 and out["device"] == "npu:1"
    assert out["backend"] == "hccl"
    assert out["result"] == [1.0, 1.0] and out["result_device"] == "npu:1"


# -- collectives, the trainer and a user's script on 2 ranks -----------------------------------


@pytest.mark.slow
def test_check_passes_on_npu_over_hccl_with_two_ranks(tmp_path):
    """docs/npu-stand-in.md's `DEVICEKIT_SIMULATE=npu python -m devicekit check`: the
    stand-in alone makes npu the device and hccl the backend."""
    args = ["check", "--max-bytes", str(1 << 20), "--json"]
    with Processes(tmp_path / "processes") as procs:
        started = procs.start(
            "check", [sys.executable, "-m", "devicekit", *args], clean_environ(**SIMULATE)
        )
        (result,) = procs.finish_all([started], TIMEOUT_S)
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
    env = clean_environ(**SIMULATE, DEVICEKIT_SIMULATE_DEVICES="4", DEVICEKIT_DEVICE="npu")
    with Processes(tmp_path / "processes") as procs:
        (result,) = procs.finish_all(
            [procs.start("list", [sys.executable, script], env)], TIMEOUT_S
        )
    assert result.returncode == 0, result.stderr
    lines = sorted(result.stdout.splitlines())
    assert lines == ["rank 0 of 2 on npu:1", "rank 1 of 2 on npu:3", "ranks per node 2"], lines


# The three ways a rank finds its NPU: LOCAL_RANK (exported here by a shell loop, as
# torchrun, torch.distributed.launch and run_8p.sh export it; test_train_runs runs those on
# the CPU, and the flat-API test below runs torchrun on the stand-in), the index launch()
# gives a spawned rank, and Ascend's RANK_ID.
NPU_LAUNCHERS = ["env", "spawn", "ascend"]
# --compile on the stand-in: inductor generates no code for its device, so the model runs
# eagerly, as rank 0 says in one line, and trains to the same weights.
COMPILED = {"spawn": ["--compile"]}
NO_COMPILER = (
    "devicekit: warning: no compiler for npu here (torch_npu's Inductor backend is missing): "
    "the model is not compiled and runs eagerly"
)


@pytest.fixture(scope="module")
def main_runs(tmp_path_factory):
    """{launcher: (its processes' Finished, its checkpoint)} of main.py's TINY run on npu
    under each of NPU_LAUNCHERS (spawn's with --compile, which the stand-in cannot do), and
    {"cpu": ...} of the same run on the CPU in fp32 (the npu runs compute with the same
    kernels), RANK_ID's way: all four at once."""
    root = tmp_path_factory.mktemp("main_runs")
    runs = {"cpu": ("ascend", ["--no-amp", "--no-channels-last"], {})}
    simulated = {"DEVICEKIT_SIMULATE": "npu", "DEVICEKIT_DEVICE": "auto"}
    runs.update(
        {
            launcher: (launcher, ["--device", "npu", *COMPILED.get(launcher, [])], simulated)
            for launcher in NPU_LAUNCHERS
        }
    )
    started = {}
    with Processes(root / "processes") as procs:
        for name, (launcher, args, env) in runs.items():
            folder = root / name
            folder.mkdir()
            started[name] = start(
                procs,
                launcher,
                MAIN,
                [*TINY, *args, "--output-dir", folder / "out"],
                2,
                folder,
                name=name,
                **env,
            )
        finished = {name: procs.finish_all(procs_, TIMEOUT_S) for name, procs_ in started.items()}
    return {
        name: (succeeded(results), load_checkpoint(root / name / "out"))
        for name, results in finished.items()
    }


@pytest.mark.slow
@pytest.mark.parametrize("launcher", NPU_LAUNCHERS)
def test_main_trains_on_npu_and_matches_the_cpu_bit_for_bit(launcher, main_runs):
    results, checkpoint = main_runs[launcher]
    stdout = results[0].stdout
    assert stdout.startswith("=> tinynet on npu ("), stdout
    assert ", fp32" in stdout.splitlines()[0], stdout
    warnings = [
        line for r in results for line in (r.stdout + r.stderr).splitlines() if "Warning" in line
    ]
    assert not warnings, describe(results)
    said = [line for r in results for line in r.stderr.splitlines() if "compile" in line]
    assert said == ([NO_COMPILER] if launcher in COMPILED else []), describe(results)
    assert_bitwise_equal(
        checkpoint["state_dict"],
        main_runs["cpu"][1]["state_dict"],
        f"{launcher} on npu against RANK_ID's ranks on cpu",
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


@pytest.mark.parametrize("value", UNKNOWN_DEVICES)
def test_an_unknown_simulated_device_is_refused_in_one_line(ran, value):
    line = scenario_error_line(result(ran["scenarios"], f"simulate {value}"))
    assert line == (
        f"error: DEVICEKIT_SIMULATE={value!r} is not a device devicekit can "
        "simulate: use npu, or unset it"
    )


@pytest.mark.parametrize("case, env, says", [(i, *c) for i, c in enumerate(BAD_MACHINES)])
def test_a_bad_simulated_machine_is_refused_in_one_line(ran, case, env, says):
    line = scenario_error_line(result(ran["scenarios"], f"machine {case}"))
    assert says in line, (env, line)


def test_an_unordered_visible_list_is_refused_by_the_npu_kind(ran):
    line = scenario_error_line(result(ran["scenarios"], "unordered"))
    assert "ASCEND_RT_VISIBLE_DEVICES='1,0' is not in ascending order" in line, line


def test_a_real_torch_npu_beside_the_stand_in_is_refused(ran):
    line = scenario_error_line(result(ran["scenarios"], "real torch_npu"))
    assert "torch_npu is installed here" in line and "unset DEVICEKIT_SIMULATE" in line, line


def test_no_compiler_is_one_line_and_leaves_nothing_behind(ran):
    cache = ran["folder"] / "cache"
    line = scenario_error_line(result(ran["scenarios"], "no compiler"))
    assert "needs a C++ compiler ('no-such-compiler' is not on PATH)" in line, line
    assert "apt-get install g++" in line, line
    assert not cache.exists(), list(cache.iterdir())


def test_profile_records_the_host_where_torch_npu_is_absent(ran):
    """The stand-in registers torch.npu without torch_npu, whose profiler sees the NPU:
    devicekit.profile still works, with torch.profiler recording the host."""
    assert "aten::mm" in scenario_out(ran, "profile")["names"]

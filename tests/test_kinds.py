"""Each device kind's decisions, the registry, detection and backend mapping."""

import importlib.util
import re
import subprocess
import sys
import types

import pytest
import torch

import devicekit
from conftest import clean_environ
from devicekit import kinds
from devicekit.distributed import resolve_backend
from devicekit.errors import UsageError
from devicekit.kinds.resolve import resolve_kind
from devicekit.kinds.visible import parse_ascend, parse_cuda
from support.launchers import child_env, start
from support.paths import REPO
from support.processes import Processes


@pytest.fixture
def fake_cuda(monkeypatch):
    """Pretend torch was built with CUDA and two GPUs are visible; record device calls."""
    calls = []
    monkeypatch.setattr(
        torch.accelerator, "current_accelerator", lambda check_available=False: torch.device("cuda")
    )
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: calls.append(("set_device", index)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append(("synchronize",)))
    return calls


def test_registry_names_and_aliases():
    assert kinds.names() == ["npu", "cuda", "xpu", "cpu"]
    assert kinds.get("gpu") is kinds.get("cuda")
    assert kinds.get("CPU").name == "cpu"
    with pytest.raises(
        UsageError, match="unknown device 'tpu': choose one of auto, npu, cuda, xpu, cpu, gpu"
    ):
        kinds.get("tpu")


@pytest.mark.parametrize(
    "name,backend,visible",
    [
        ("cpu", "gloo", None),
        ("cuda", "nccl", "CUDA_VISIBLE_DEVICES"),
        ("npu", "hccl", "ASCEND_RT_VISIBLE_DEVICES"),
        ("xpu", "xccl", "ZE_AFFINITY_MASK"),
    ],
)
def test_backend_and_visible_variable(name, backend, visible):
    kind = kinds.get(name)
    assert kind.backend == backend
    assert kind.visible_devices_env == visible


def test_torch_default_backend_map_agrees():
    # Where torch knows the device, devicekit's answer is torch's answer.
    for name in ("cpu", "cuda", "xpu"):
        assert kinds.get(name).backend == torch.distributed.get_default_backend_for_device(name)


def test_cpu_kind_decisions():
    cpu = kinds.get("cpu")
    assert cpu.is_available() and cpu.device_count() == 1
    assert cpu.ddp_device_ids(0) is None and cpu.pin_memory is False
    assert cpu.amp_dtype() == torch.bfloat16 and not cpu.needs_grad_scaler(torch.bfloat16)
    assert cpu.memory_stats()["max_rss"] > 0
    assert cpu.device() == torch.device("cpu")


@pytest.mark.parametrize(
    "cores,ranks,environ,expected",
    [
        (16, 2, {}, 8),  # the node's cores split over its ranks
        (16, 3, {}, 5),
        (2, 8, {}, 1),  # never fewer than one
        (16, 2, {"OMP_NUM_THREADS": "3"}, 3),  # the user's (or the launcher's) choice stands
    ],
)
def test_cpu_threads_per_rank(monkeypatch, cores, ranks, environ, expected):
    chosen = []
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(torch, "set_num_threads", chosen.append)
    monkeypatch.setattr(torch, "get_num_threads", lambda: int(environ["OMP_NUM_THREADS"]))
    assert kinds.get("cpu").configure_host_threads(ranks, environ) == expected
    assert chosen == ([] if environ else [expected])


def test_cuda_kind_on_a_cpu_build_explains_itself():
    with pytest.raises(UsageError, match=r"^device_type='cuda': this torch has no CUDA support"):
        resolve_kind("cuda")
    with pytest.raises(UsageError, match=r"^--device cuda: this torch has no CUDA support"):
        resolve_kind("cuda", source="--device")
    with pytest.raises(UsageError, match="no CUDA support"):
        resolve_kind("gpu")


def test_cuda_kind_decisions(fake_cuda):
    cuda = kinds.get("cuda")
    assert cuda.is_available() and cuda.device_count() == 2
    assert cuda.ddp_device_ids(1) == [1] and cuda.pin_memory
    assert cuda.amp_dtype() == torch.float16 and cuda.needs_grad_scaler(torch.float16)
    assert cuda.amp_dtype("bf16") == torch.bfloat16
    assert not cuda.needs_grad_scaler(cuda.amp_dtype("bfloat16"))
    cuda.set_device(1)
    cuda.synchronize()
    assert fake_cuda == [("set_device", 1), ("synchronize",)]
    assert cuda.device(1) == torch.device("cuda", 1)


def test_auto_prefers_cuda_over_cpu(fake_cuda):
    assert resolve_kind().name == "cuda"


def test_transfer_to_npu_shim_does_not_make_cuda_look_present(monkeypatch):
    # transfer_to_npu patches torch.cuda.is_available to True; torch.accelerator is not fooled.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    assert resolve_kind().name == "cpu"
    assert not kinds.get("cuda").is_available()


def test_environment_variable_and_explicit_argument(monkeypatch, fake_cuda):
    monkeypatch.setenv("DEVICEKIT_DEVICE", "cpu")
    assert resolve_kind().name == "cpu"
    assert resolve_kind("cuda").name == "cuda"
    monkeypatch.setenv("DEVICEKIT_DEVICE", "auto")
    assert resolve_kind().name == "cuda"


def test_cuda_visible_devices_checked(monkeypatch, fake_cuda):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,0")
    with pytest.raises(UsageError, match="CUDA_VISIBLE_DEVICES='0,0' lists device 0 twice"):
        resolve_kind("cuda")


def test_visible_device_parsers():
    var = "ASCEND_RT_VISIBLE_DEVICES"
    assert parse_ascend(var, "0,1,4") == [0, 1, 4]
    assert parse_ascend(var, "") == []
    with pytest.raises(
        UsageError, match=r"not in ascending order.*write ASCEND_RT_VISIBLE_DEVICES=0,1"
    ):
        parse_ascend(var, "1,0")
    with pytest.raises(UsageError, match="lists device 2 twice"):
        parse_ascend(var, "2,2")
    with pytest.raises(UsageError, match="'x' is not a device id"):
        parse_ascend(var, "0,x")
    with pytest.raises(UsageError, match="empty entry"):
        parse_ascend(var, "0,,1")
    assert parse_cuda("CUDA_VISIBLE_DEVICES", "3,1") == [3, 1]
    assert parse_cuda("CUDA_VISIBLE_DEVICES", "GPU-8a3f-11") == ["GPU-8a3f-11"]
    with pytest.raises(UsageError, match="CUDA ignores every device from there on"):
        parse_cuda("CUDA_VISIBLE_DEVICES", "0,gpu1")


@pytest.mark.parametrize(
    "requested,kind,expected,warns",
    [
        (None, "cpu", "gloo", False),
        ("gloo", "cpu", "gloo", False),
        ("nccl", "cpu", "gloo", True),
        ("hccl", "cpu", "gloo", True),
        ("nccl", "npu", "hccl", True),
        ("gloo", "npu", "hccl", True),
        ("gloo", "cuda", "gloo", False),
        ("hccl", "cuda", "nccl", True),
        ("xccl", "cpu", "gloo", True),
        ("nccl", "xpu", "xccl", True),
        ("gloo", "xpu", "gloo", False),
    ],
)
def test_backend_that_contradicts_the_device_is_mapped(requested, kind, expected, warns, capsys):
    assert resolve_backend(kinds.get(kind), requested) == expected
    err = capsys.readouterr().err
    assert (err.count("warning") == 1) == warns
    if requested == "hccl" and warns:
        assert "Habana" in err
    if requested == "xccl" and warns:
        assert "backend='xccl' is for Intel GPUs, not cpu; using gloo" in err


def test_amp_helpers():
    devicekit.runtime.kind("cpu")
    scaler = devicekit.GradScaler()
    assert not scaler.is_enabled()  # bfloat16 on a CPU needs no loss scaling
    loss = torch.tensor(3.0)
    assert scaler.scale(loss) is loss  # a no-op object, not None: no `if scaler:` branches
    with devicekit.autocast(enabled=True):
        out = torch.nn.Linear(4, 4)(torch.ones(2, 4))
    assert out.dtype == torch.bfloat16
    with devicekit.autocast(enabled=False):
        assert torch.nn.Linear(4, 4)(torch.ones(2, 4)).dtype == torch.float32
    with devicekit.autocast():  # the device's default, whatever this CPU is
        expected = torch.bfloat16 if kinds.get("cpu").default_amp() else torch.float32
        assert torch.nn.Linear(4, 4)(torch.ones(2, 4)).dtype == expected
    scaler = devicekit.GradScaler(enabled=True, dtype="float16", init_scale=1024)
    assert scaler.is_enabled() and scaler.get_scale() == 1024
    with pytest.raises(UsageError, match="unknown AMP dtype 'int8'"):
        devicekit.amp_dtype("int8")


def test_seeding_is_per_rank_and_repeatable():
    devicekit.seed_everything(7, rank=0)
    first = torch.rand(3)
    devicekit.seed_everything(7, rank=0)
    assert torch.equal(first, torch.rand(3))
    devicekit.seed_everything(7, rank=1)
    assert not torch.equal(first, torch.rand(3))


def test_import_devicekit_leaves_torch_npu_alone_and_switches_autoload_off():
    code = (
        "import os, sys, devicekit; assert 'torch_npu' not in sys.modules; "
        "print(os.environ['TORCH_DEVICE_BACKEND_AUTOLOAD'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=clean_environ(),
        timeout=120,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "0"
    env = clean_environ(TORCH_DEVICE_BACKEND_AUTOLOAD="1")
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        timeout=120,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "1"  # the user's choice stands


# -- Intel XPU: a CUDA-like kind in one module, against a simulated torch.xpu -------------------


@pytest.fixture
def fake_xpu(monkeypatch):
    """Pretend torch was built for Intel GPUs with two visible; record every torch.xpu call."""
    calls = []

    def recorded(name, result=None):
        def call(*args):
            calls.append((name, *args))
            return result

        return call

    monkeypatch.setattr(
        torch.accelerator, "current_accelerator", lambda check_available=False: torch.device("xpu")
    )
    for name, result in (
        ("device_count", 2),
        ("set_device", None),
        ("synchronize", None),
        ("current_device", 1),
        ("memory_allocated", 512),
    ):
        monkeypatch.setattr(torch.xpu, name, recorded(name, result))
    return calls


def test_xpu_kind_decisions(fake_xpu):
    xpu = kinds.get("xpu")
    assert (xpu.backend, xpu.visible_devices_env, xpu.start_method) == (
        "xccl",
        "ZE_AFFINITY_MASK",
        "spawn",
    )
    assert xpu.is_available() and xpu.device_count() == 2
    assert xpu.ddp_device_ids(1) == [1] and xpu.pin_memory
    assert xpu.amp_dtype() == torch.float16 and xpu.needs_grad_scaler(torch.float16)
    assert xpu.device(1) == torch.device("xpu", 1)
    xpu.set_device(1)
    xpu.synchronize()
    assert (xpu.current_device(), xpu.memory("memory_allocated")) == (1, 512)
    assert fake_xpu[-4:] == [
        ("set_device", 1),
        ("synchronize",),
        ("current_device",),
        ("memory_allocated",),
    ]


def test_auto_detection_finds_the_xpu(fake_xpu):
    assert resolve_kind().name == "xpu"


def test_xpu_amp_uses_the_xpu_device_type(fake_xpu):
    devicekit.runtime.kind("xpu")
    with devicekit.autocast(enabled=True) as context:
        assert context.device == "xpu" and context.fast_dtype == torch.float16
    scaler = devicekit.GradScaler(enabled=True)
    assert scaler.is_enabled() and scaler._device == "xpu"


@pytest.mark.parametrize(
    "mask, parsed", [("0,1", [0, 1]), ("0.0,0.1", ["0.0", "0.1"]), ("1", [1]), ("", [])]
)
def test_ze_affinity_mask_devices_and_tiles(mask, parsed, monkeypatch):
    assert kinds.get("xpu").visible_devices({"ZE_AFFINITY_MASK": mask}) == parsed


@pytest.mark.parametrize(
    "mask, says",
    [
        ("0,a", "'a' is not a device (N) or a tile of one (N.M)"),
        ("0,0", "lists device 0 twice"),
        ("0,,1", "has an empty entry"),
    ],
)
def test_bad_ze_affinity_mask_fails_before_any_xpu_call(fake_xpu, monkeypatch, mask, says):
    monkeypatch.setenv("ZE_AFFINITY_MASK", mask)
    with pytest.raises(
        UsageError, match=re.escape(f"ZE_AFFINITY_MASK={mask!r}") + ".*" + re.escape(says)
    ):
        resolve_kind("xpu")
    assert fake_xpu == []


def test_xpu_on_a_build_without_it_explains_itself():
    with pytest.raises(
        UsageError,
        match=r"^--device xpu: this torch has no XPU support "
        r"\(torch.accelerator reports None\); install torch's "
        r"XPU build",
    ):
        resolve_kind("xpu", source="--device")


# -- DeviceKind is an abstract base; register_kind() adds a kind from the user's code ------------


class TwinCpu(kinds.cpu.CpuKind):
    """A user's own kind: the CPU under another name."""

    name = "twincpu"


@pytest.fixture
def registry():
    """The kinds registry, restored after the test."""
    saved = dict(kinds._REGISTRY)
    yield
    kinds._REGISTRY.clear()
    kinds._REGISTRY.update(saved)


def test_a_kind_must_answer_probe_and_device_count():
    class Incomplete(kinds.DeviceKind):
        name = "half"

        def probe(self):
            return True, ""

    with pytest.raises(TypeError, match="device_count"):
        Incomplete()


def test_an_accelerator_kind_without_a_visible_devices_variable_says_why_it_is_unusable():
    # A user's own kind may have no visible-devices variable: probe() named it and, for
    # None, raised TypeError from os.environ.get instead of saying no device is visible.
    class Mtia(kinds.AcceleratorKind):
        name = "mtia"
        device_noun = "MTIA device"
        check_hint = "check the driver"
        accelerator_type = staticmethod(lambda: "mtia")
        module = types.SimpleNamespace(device_count=lambda: 0)

    assert Mtia().probe() == (False, "no MTIA device is visible; check the driver")


def test_register_kind_before_the_cpu_fallback(registry, monkeypatch):
    devicekit.register_kind(TwinCpu())
    assert kinds.names() == ["npu", "cuda", "xpu", "twincpu", "cpu"]
    assert resolve_kind().name == "twincpu"  # auto-detection tries it before the CPU
    assert resolve_kind("twincpu").name == "twincpu"
    monkeypatch.setenv("DEVICEKIT_DEVICE", "twincpu")
    assert resolve_kind().name == "twincpu"
    devicekit.register_kind(TwinCpu())  # the script's module imported a second time
    assert kinds.names().count("twincpu") == 1


def test_register_kind_at_a_chosen_place(registry):
    devicekit.register_kind(TwinCpu(), before="npu")
    assert kinds.names()[0] == "twincpu"


@pytest.mark.parametrize(
    "make, error, says",
    [
        (lambda: object(), TypeError, "takes a devicekit DeviceKind"),
        (
            lambda: type("Cuda2", (TwinCpu,), {"name": "cuda"})(),
            UsageError,
            "a device kind named 'cuda' is registered already (CudaKind)",
        ),
        (
            lambda: type("Gpu", (TwinCpu,), {"name": "gpu"})(),
            UsageError,
            "Gpu.name='gpu' must be a lower-case device type other than auto and gpu",
        ),
        (lambda: type("Loud", (TwinCpu,), {"name": "Loud"})(), UsageError, "must be a lower-case"),
    ],
)
def test_register_kind_refuses(registry, make, error, says):
    with pytest.raises(error, match=re.escape(says)):
        devicekit.register_kind(make())


def test_register_kind_before_an_unknown_kind(registry):
    with pytest.raises(
        UsageError,
        match=r"register_kind\(before='tpu'\): no such kind; "
        r"choose one of npu, cuda, xpu, cpu",
    ):
        devicekit.register_kind(TwinCpu(), before="tpu")


_SCRIPT = """
import sys
import devicekit
from devicekit.kinds.cpu import CpuKind


class TwinCpu(CpuKind):
    name = "twincpu"


devicekit.register_kind(TwinCpu())  # at import time: launch()'s spawned ranks run it too


def main(local_rank):
    devicekit.init_distributed()
    # One write per line: both ranks write to one unbuffered stdout.
    sys.stdout.write(f"rank {devicekit.rank()} of {devicekit.world_size()} on "
                     f"{devicekit.device_type()}\\n")
    devicekit.destroy_process_group()


if __name__ == "__main__":
    devicekit.launch(main, nprocs=2, device_type="twincpu")
"""


def test_a_kind_registered_at_import_time_reaches_spawned_ranks(tmp_path):
    script = tmp_path / "own_kind.py"
    script.write_text(_SCRIPT)
    env = child_env(DEVICEKIT_DEVICE=None)  # the script names its kind itself
    with Processes(tmp_path / "procs") as procs:
        # python own_kind.py: its launch(nprocs=2) starts the ranks
        [proc] = start(procs, "python", script, [], None, tmp_path, env=env, name="run")
        result = procs.finish(proc, 180)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [
        "rank 0 of 2 on twincpu",
        "rank 1 of 2 on twincpu",
    ], result.stdout


@pytest.mark.parametrize(
    "onednn, capability, native",
    [
        (True, {"architecture": "x86_64", "avx512_bf16": True, "amx_bf16": False}, True),
        (True, {"architecture": "x86_64", "avx512_bf16": False, "amx_bf16": True}, True),
        # Cascade Lake: AVX-512 without bf16; oneDNN emulates it, 2x slower than fp32
        (True, {"architecture": "x86_64", "avx512_bf16": False, "amx_bf16": False}, False),
        (False, {"architecture": "x86_64", "avx512_bf16": False, "amx_bf16": False}, False),
        (True, {"architecture": "arm64"}, True),  # oneDNN says yes on Arm only with BF16
        (False, {"architecture": "arm64"}, False),
        (True, None, False),  # a torch without the capability query: fp32
    ],
)
def test_bf16_autocast_is_the_cpu_default_only_where_the_cpu_computes_bf16(
    monkeypatch, onednn, capability, native
):
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: onednn)
    if capability is None:
        monkeypatch.delattr(torch._C._cpu, "_get_cpu_capability")
    else:
        monkeypatch.setattr(torch._C._cpu, "_get_cpu_capability", lambda: capability)
    assert kinds.get("cpu").default_amp() is native
    devicekit.runtime.kind("cpu")
    assert devicekit.amp_enabled() is native
    with devicekit.autocast():
        out = torch.nn.Linear(4, 4)(torch.ones(2, 4))
    assert out.dtype == (torch.bfloat16 if native else torch.float32)


@pytest.mark.parametrize("told, native", [("1", True), ("0", False)])
def test_devicekit_cpu_bf16_takes_either_policy_on_any_cpu(monkeypatch, told, native):
    """DEVICEKIT_CPU_BF16 answers instead of the CPU's flags, against what they say."""
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: not native)
    flags = {"architecture": "x86_64", "avx512_bf16": not native, "amx_bf16": False}
    monkeypatch.setattr(torch._C._cpu, "_get_cpu_capability", lambda: flags)
    monkeypatch.setenv("DEVICEKIT_CPU_BF16", told)
    cpu = kinds.get("cpu")
    assert cpu.default_amp() is native and cpu.prefers_channels_last(native) is native


@pytest.mark.parametrize(
    "variable, value, says",
    [
        (
            "DEVICEKIT_CPU_BF16",
            "yes",
            "DEVICEKIT_CPU_BF16='yes' is neither 1 nor 0: set 1 to treat this CPU as having "
            "bf16 instructions, 0 as not, or unset it to detect them",
        ),
        (
            "DEVICEKIT_AMP_DTYPE",
            "int8",
            "DEVICEKIT_AMP_DTYPE='int8' is not an AMP dtype: set float16 or bfloat16, or unset "
            "it for the cpu default",
        ),
    ],
)
def test_a_policy_variable_of_another_value_is_refused_in_one_line(
    monkeypatch, variable, value, says
):
    """Asked for the CPU's precision (autocast on, in which dtype), each variable refuses a
    value it does not know."""
    monkeypatch.setenv(variable, value)
    cpu = kinds.get("cpu")
    with pytest.raises(devicekit.UsageError) as refused:
        cpu.default_amp(), cpu.amp_dtype()
    assert str(refused.value) == says


@pytest.mark.parametrize("kind", ["cpu", "cuda"])
def test_devicekit_amp_dtype_chooses_autocasts_dtype_and_so_the_loss_scaling(monkeypatch, kind):
    """DEVICEKIT_AMP_DTYPE=float16 on a CPU is a GPU's precision (fp16 with a GradScaler
    that scales); bfloat16 on a GPU needs no loss scaling. An explicit dtype still wins."""
    other = {"cpu": torch.float16, "cuda": torch.bfloat16}[kind]
    monkeypatch.setenv("DEVICEKIT_AMP_DTYPE", str(other).removeprefix("torch."))
    chosen = kinds.get(kind)
    assert chosen.amp_dtype() == other
    assert chosen.needs_grad_scaler(chosen.amp_dtype()) is (other == torch.float16)
    assert chosen.amp_dtype("bf16") == torch.bfloat16


def test_devicekit_amp_dtype_fp16_on_a_cpu_scales_the_loss(monkeypatch):
    monkeypatch.setenv("DEVICEKIT_AMP_DTYPE", "fp16")
    devicekit.runtime.kind("cpu")
    scaler = devicekit.GradScaler(enabled=True)
    assert scaler.is_enabled() and scaler.scale(torch.ones(())).item() == 2.0**16
    with devicekit.autocast(enabled=True):
        out = torch.nn.Linear(4, 4)(torch.ones(2, 4))
    assert out.dtype == torch.float16


# -- the worked example of docs/extending.md: a device kind of one's own --------------------------


def test_the_worked_example_of_a_device_kind(registry):
    path = REPO / "docs" / "extending" / "device_kind.py"
    spec = importlib.util.spec_from_file_location("device_kind_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)  # registers the kind, as a script's module does
    assert kinds.names() == ["npu", "cuda", "xpu", "musa", "cpu"]
    assert isinstance(kinds.get("musa"), example.MusaKind)
    assert kinds.backend_owner("mccl") == "Moore Threads GPUs"
    # Here torch_musa is not installed: chosen, the kind says so; auto-detection passes it.
    with pytest.raises(
        UsageError,
        match=r"^--device musa: torch_musa is not installed; install the torch_musa that matches",
    ):
        resolve_kind("musa", source="--device")
    assert resolve_kind().name != "musa"
    kind = example.MusaKind()
    assert kind.visible_devices({"MUSA_VISIBLE_DEVICES": "2,0"}) == [2, 0]
    assert kind.visible_devices({}) is None
    with pytest.raises(UsageError, match=r"^MUSA_VISIBLE_DEVICES='0,0' lists device 0 twice: "):
        kind.visible_devices({"MUSA_VISIBLE_DEVICES": "0,0"})
    devicekit.register_kind(example.MusaKind())  # again: changes nothing
    assert kinds.names().count("musa") == 1

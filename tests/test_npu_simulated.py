"""The NPU kind driven against a simulated torch_npu (tests/fake_npu/torch_npu), for what the
npu stand-in (tests/test_npu_standin.py) cannot show: which torch_npu calls devicekit makes
and in what order, CANN missing, import failures, a chip's compile mode.

Importing the fake renames PrivateUse1 to `npu`, registers `torch.npu` and the `hccl`
backend: process-global and irreversible, so the scenarios that load it run outside the test
process, all in one (support/scenario_process.py: each starts as a new process would, with
its own variables and a devicekit that knows nothing yet) and report JSON. The scenarios
that need torch_npu absent or failing to import run first, before any import of it
succeeds. The fake records each device call in `torch_npu.CALLS`, emptied before each
scenario, so a scenario can show that devicekit rejected a bad setting before touching
the NPU.
"""

import importlib.util
import os
from pathlib import Path

import pytest

from devicekit import kinds
from devicekit.distributed import resolve_backend
from devicekit.environments import ALL_VARIABLES
from support.processes import Processes, describe
from support.scenario_process import Scenario, outcome, result, start_batch

REPO = Path(__file__).resolve().parents[1]
FAKE_NPU = REPO / "tests" / "fake_npu"
TIMEOUT_S = 120

CANN_ERROR = "libhccl.so: cannot open shared object file: No such file or directory"

# Variables that would change what a devicekit subprocess sees (every launcher variable
# devicekit reads, and more); each scenario sets its own.
_SCRUBBED = {
    "TORCH_DEVICE_BACKEND_AUTOLOAD",
    "CUDA_VISIBLE_DEVICES",
    "TORCH_TRANSFER_TO_NPU",
    *ALL_VARIABLES,
}
_SCRUBBED_PREFIXES = ("ASCEND_", "HCCL_", "DEVICEKIT_", "FAKE_NPU_")

# Run once, before the scenarios: the names each scenario's code uses.
_PRELUDE = """
import json, sys
import torch
import devicekit
from devicekit import UsageError, kinds
from devicekit.kinds.resolve import resolve_kind
from devicekit.environments import resolve_launch
"""
# Around each scenario's code: the fake's record emptied and its current device back to 0,
# as a new import leaves them; at the end the calls recorded (None while torch_npu was
# never imported).
_BEFORE = """
if "torch_npu" in sys.modules:
    sys.modules["torch_npu"].CALLS.clear()
    sys.modules["torch_npu"]._current[0] = 0
"""
_AFTER = """
fake = sys.modules.get("torch_npu")
out["calls"] = None if fake is None else list(fake.CALLS)
"""
_COMMAND = "import runpy\nrunpy.run_module('devicekit', run_name='__main__', alter_sys=True)\n"


def subprocess_env(fake=True, **overrides):
    """os.environ without launcher/device variables; PYTHONPATH holds the fake torch_npu
    (when `fake`) and the repo root; `overrides` applied."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in _SCRUBBED and not name.startswith(_SCRUBBED_PREFIXES)
    }
    paths = [str(FAKE_NPU)] if fake else []
    paths.append(str(REPO))
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(overrides)
    return env


def scenario(name, code, *argv, **env):
    """A scenario whose code runs between _BEFORE and _AFTER."""
    return Scenario(name, _BEFORE + code + _AFTER, env, argv)


def command(name, *argv, **env):
    """`python -m devicekit ARGV` as a scenario: its exit code and its output."""
    return Scenario(name, _COMMAND, env, argv)


_MEMORY = """
kind = resolve_kind("npu")
start = len(sys.modules["torch_npu"].CALLS)
kind.synchronize()
out["stats"] = kind.memory_stats()
out["start"] = start
"""
_AUTO = """
if sys.argv[1] == "cuda-present":
    kinds.get("cuda").probe = lambda: (True, "")
out["kind"] = resolve_kind().name
"""
_VISIBLE = """
try:
    out["kind"] = resolve_kind(sys.argv[1]).name
except UsageError as error:
    out["error"] = str(error)
"""
_PROCESS_GROUP = """
devicekit.runtime.kind("npu")
start = len(sys.modules["torch_npu"].CALLS)
ctx = devicekit.init_distributed(options=devicekit.LaunchOptions(gpu=1))
out.update(mode=ctx.mode, index=ctx.device_index, start=start,
           backend=torch.distributed.get_backend(), device=str(devicekit.device()))
devicekit.destroy_process_group()
"""
_NCCL = """
import contextlib, io
kind = resolve_kind("npu")
with contextlib.redirect_stderr(io.StringIO()) as captured:
    out["backend"] = devicekit.distributed.resolve_backend(kind, "nccl")
out["warning"] = captured.getvalue()
"""
# Without torch_npu on the path (the fake's folder left out while it runs).
_NOT_INSTALLED = f"""
sys.path.remove({str(FAKE_NPU)!r})
try:
    resolve_kind("npu")
except UsageError as error:
    out["error"] = str(error)
finally:
    sys.path.insert(0, {str(FAKE_NPU)!r})
"""
_LOAD_STATE = """
out["state"] = kinds.get("npu").load_state()
"""
_BIND = """
devicekit.runtime.kind("npu")
start = len(sys.modules["torch_npu"].CALLS)
try:
    devicekit.set_device(1)
    devicekit.set_device(0)
except UsageError as error:
    out["error"] = str(error)
out["start"] = start
"""
_GRAD_SCALER = """
devicekit.runtime.kind("npu")
fp16 = devicekit.GradScaler(enabled=True, init_scale=1024, dynamic=False)
bf16 = devicekit.GradScaler(enabled=True, dtype="bfloat16")
out.update(cls=type(fp16).__module__ + "." + type(fp16).__qualname__,
           torch_scaler=isinstance(fp16, torch.amp.GradScaler),
           fp16=fp16.is_enabled(), scale=fp16.get_scale(), bf16=bf16.is_enabled())
"""
_PROFILE = """
out["folder"] = sys.argv[1]
from devicekit import runtime
runtime.kind("npu")
with devicekit.profile(sys.argv[1], wait=0, warmup=1, active=2) as prof:
    for _ in range(3):
        torch.ones(4).sum()
        prof.step()
"""

IMPORT_ERRORS = {
    "missing-module": "No module named 'yaml'",
    "undefined-symbol": "/site-packages/torch_npu/_C.cpython-311-x86_64-linux-gnu.so: "
    "undefined symbol: _ZN3c104impl",
}
BAD_VISIBLE = [
    ("1,0", "ascending"),
    ("0,0", "twice"),
    ("0,a", "not a device id"),
    ("0,,1", "empty entry"),
]
COMPILE_MODES = [
    ("Ascend910B3", None, False),
    ("Ascend910_9391", None, False),  # A2, A3: binary kernels
    ("Ascend910A", None, None),  # 910A: CANN's default (kernels compiled on line) stands
    ("Ascend910B3", "1", True),
    ("Ascend910A", "0", False),
]


def _scenarios(folder):
    """Every scenario, in the order they run: torch_npu absent, then failing to import,
    then the fake imported."""
    return [
        scenario("not installed", _NOT_INSTALLED),
        *(
            scenario(f"import error {name}", _LOAD_STATE, FAKE_NPU_IMPORT_ERROR=message)
            for name, message in IMPORT_ERRORS.items()
        ),
        command("check without cann", "check", "--device", "npu", FAKE_NPU_IMPORT_ERROR=CANN_ERROR),
        scenario("memory", _MEMORY, FAKE_NPU_COUNT="1"),
        scenario("auto cuda-present", _AUTO, "cuda-present", FAKE_NPU_COUNT="2"),
        scenario("auto plain", _AUTO, "plain", FAKE_NPU_COUNT="0"),
        *(
            scenario(
                f"visible {value} {requested}",
                _VISIBLE,
                requested,
                FAKE_NPU_COUNT="8",
                ASCEND_RT_VISIBLE_DEVICES=value,
            )
            for value, _ in BAD_VISIBLE
            for requested in ("npu", "auto")
        ),
        scenario("process group", _PROCESS_GROUP, FAKE_NPU_COUNT="2"),
        scenario("nccl", _NCCL),
        command("check without npu", "check", "--device", "npu", FAKE_NPU_COUNT="0"),
        *(
            scenario(f"bind {chip} {override}", _BIND, **_bind_env(chip, override))
            for chip, override, _ in COMPILE_MODES
        ),
        scenario("bad jit", _BIND, FAKE_NPU_COUNT="2", DEVICEKIT_NPU_JIT_COMPILE="yes"),
        scenario("grad scaler", _GRAD_SCALER, FAKE_NPU_COUNT="1"),
        scenario("profile", _PROFILE, str(folder / "trace"), FAKE_NPU_COUNT="1"),
    ]


def _bind_env(chip, override):
    env = {"FAKE_NPU_COUNT": "2", "FAKE_NPU_NAME": chip}
    if override is not None:
        env["DEVICEKIT_NPU_JIT_COMPILE"] = override
    return env


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """{scenario: what it left} of every scenario, run in one process against the fake."""
    folder = tmp_path_factory.mktemp("fake_npu")
    with Processes(folder / "processes") as procs:
        batch = start_batch(
            procs, "scenarios", _scenarios(folder), subprocess_env(), folder, prelude=_PRELUDE
        )
        (finished,) = procs.finish_all([batch.process], TIMEOUT_S)
    assert finished.returncode == 0, describe([finished])
    return batch.results()


def error_line(found):
    """The single line a CLI run that exited with code 2 printed on stderr."""
    assert found["exit"] == 2, found
    lines = found["stderr"].strip().splitlines()
    assert len(lines) == 1, found["stderr"]
    assert "Traceback" not in found["stderr"]
    return lines[0]


def test_memory_stats_and_synchronize_go_to_torch_npu(ran):
    out = outcome(ran, "memory")
    assert out["stats"] == {"allocated": 0, "max_allocated": 0, "reserved": 0}
    assert [call[0] for call in out["calls"][out["start"] :]] == [
        "synchronize",
        "memory_allocated",
        "max_memory_allocated",
        "memory_reserved",
    ]


# -- auto-detection ----------------------------------------------------------------------------


def test_auto_detection_prefers_npu_even_when_cuda_looks_present(ran):
    """transfer_to_npu makes CUDA look present on an NPU machine: NPU must win."""
    assert outcome(ran, "auto cuda-present")["kind"] == "npu"


def test_auto_detection_without_npus_picks_cpu(ran):
    out, stderr = outcome(ran, "auto plain"), result(ran, "auto plain")["stderr"]
    assert out["kind"] == "cpu"
    assert "no NPU is usable" in stderr and "skipped npu" in stderr


# -- ASCEND_RT_VISIBLE_DEVICES is validated before any NPU call --------------------------------


@pytest.mark.parametrize("requested", ["npu", "auto"])
@pytest.mark.parametrize("value, says", BAD_VISIBLE)
def test_bad_visible_devices_fail_before_any_npu_call(ran, requested, value, says):
    out = outcome(ran, f"visible {value} {requested}")
    assert "error" in out, out
    assert "ASCEND_RT_VISIBLE_DEVICES" in out["error"] and says in out["error"]
    assert not out["calls"], f"devicekit called the NPU runtime first: {out['calls']}"


# -- process group and backends -----------------------------------------------------------------


def test_init_process_group_binds_the_npu_before_anything_else(ran):
    out = outcome(ran, "process group")
    assert out["mode"] == "single" and out["index"] == 1
    assert out["backend"] == "hccl" and out["device"] == "npu:1"
    calls = out["calls"][out["start"] :]
    assert calls.index(["set_device", 1]) < calls.index(["new_hccl_group", 1]), calls


def test_resolve_backend_maps_nccl_to_hccl_on_npu_with_one_warning(ran):
    out = outcome(ran, "nccl")
    assert out["backend"] == "hccl"
    lines = out["warning"].strip().splitlines()
    assert len(lines) == 1 and "nccl" in lines[0] and "hccl" in lines[0], out["warning"]


def test_resolve_backend_maps_hccl_to_gloo_on_cpu(capsys):
    assert resolve_backend(kinds.get("cpu"), "hccl") == "gloo"
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "Ascend" in lines[0] and "Habana" in lines[0], lines


@pytest.mark.parametrize(
    "timeout_s, preset, expected",
    [
        (30, None, "120"),
        (600, None, "600"),
        (600.9, None, "600"),
        (10_000, None, "7200"),
        (30, "1800", "1800"),
    ],
)
def test_prepare_process_group_sets_hccl_connect_timeout(timeout_s, preset, expected):
    environ = {} if preset is None else {"HCCL_CONNECT_TIMEOUT": preset}
    kinds.get("npu").prepare_process_group(timeout_s, environ)
    assert environ == {"HCCL_CONNECT_TIMEOUT": expected}


# -- what users read when the NPU cannot run -----------------------------------------------------


def test_check_without_usable_npu_says_so_in_one_line(ran):
    line = error_line(result(ran, "check without npu"))
    assert "no NPU is usable" in line and "npu-smi" in line


def test_npu_without_torch_npu_says_how_to_install(ran):
    if importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("a real torch_npu is installed in this environment")
    out = outcome(ran, "not installed")
    assert "torch_npu is not installed" in out["error"]
    assert "pip install 'devicekit[npu]'" in out["error"]


def test_torch_npu_without_cann_names_cann_and_set_env(ran):
    line = error_line(result(ran, "check without cann"))
    assert "CANN" in line and "libhccl.so" in line and "set_env.sh" in line


@pytest.mark.parametrize("name", IMPORT_ERRORS)
def test_other_import_errors_are_not_blamed_on_cann(ran, name):
    state, reason = outcome(ran, f"import error {name}")["state"]
    assert state == "import failed"
    assert IMPORT_ERRORS[name] in reason and "set_env.sh" not in reason


# -- settings that decide speed: kernels, loss scaling ---------------------------------


@pytest.mark.parametrize("chip, override, mode", COMPILE_MODES)
def test_binding_the_npu_sets_the_compile_mode_once(ran, chip, override, mode):
    out = outcome(ran, f"bind {chip} {override}")
    calls = [call[0] for call in out["calls"][out["start"] :]]
    assert "is_jit_compile_false" not in calls  # it would initialise the device to answer
    expected = [] if mode is None else [["set_compile_mode", {"jit_compile": mode}]]
    assert [call for call in out["calls"] if call[0] == "set_compile_mode"] == expected
    assert calls[0] == "set_device" and calls.count("set_device") == 2


def test_a_bad_jit_compile_override_is_refused_before_any_npu_call(ran):
    out = outcome(ran, "bad jit")
    assert out["error"].startswith(
        "DEVICEKIT_NPU_JIT_COMPILE='yes' must be 0 (binary kernels) or 1"
    )
    assert out["calls"][out["start"] :] == []


def test_grad_scaler_is_torch_npus(ran):
    out = outcome(ran, "grad scaler")
    assert out["cls"] == "torch_npu.GradScaler" and out["torch_scaler"]
    assert (out["fp16"], out["scale"], out["bf16"]) == (True, 1024.0, False)
    assert ["amp.GradScaler", {"init_scale": 1024, "dynamic": False, "enabled": True}] in out[
        "calls"
    ]


def test_profile_uses_torch_npus_profiler_with_the_npu_activity(ran):
    out = outcome(ran, "profile")
    calls = [call for call in out["calls"] if call[0].startswith("profiler.")]
    assert calls == [
        ["profiler.schedule", {"wait": 0, "warmup": 1, "active": 2, "repeat": 1}],
        ["profiler.tensorboard_trace_handler", out["folder"]],
        ["profiler.profile", ["CPU", "NPU"]],
    ]

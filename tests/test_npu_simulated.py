"""The NPU kind driven against a simulated torch_npu (tests/fake_npu/torch_npu), for what the
npu stand-in (tests/test_npu_standin.py) cannot show: which torch_npu calls devicekit makes
and in what order, CANN missing, import failures, a chip's compile mode.

Importing the fake renames PrivateUse1 to `npu`, registers `torch.npu` and the `hccl`
backend: process-global and irreversible, so every scenario that loads it runs in a
subprocess and reports JSON. The fake records each device call in `torch_npu.CALLS`, so a
scenario can show that devicekit rejected a bad setting before touching the NPU.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devicekit import kinds
from devicekit.distributed import resolve_backend
from devicekit.environments import ALL_VARIABLES

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

# Runs before each scenario's code: `out` collects the answer, printed as JSON at the end
# together with the fake's recorded calls (None when torch_npu was never imported).
_PRELUDE = """
import json, sys
import torch
import devicekit
from devicekit import UsageError, kinds
from devicekit.kinds.resolve import resolve_kind
from devicekit.environments import resolve_launch
out = {}
"""
_EPILOGUE = """
fake = sys.modules.get("torch_npu")
out["calls"] = None if fake is None else list(fake.CALLS)
print(json.dumps(out))
"""


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


def run_python(args, fake=True, **env):
    """Run `python ARGS` from the repo root in subprocess_env(fake, **env), with a timeout."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=subprocess_env(fake, **env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def scenario(code, *argv, fake=True, **env):
    """Run `code` (after _PRELUDE, which defines `out`) in a fresh interpreter; return
    (the JSON it reports, its stderr). Extra `argv` are in sys.argv[1:]."""
    result = run_python(["-c", _PRELUDE + code + _EPILOGUE, *argv], fake=fake, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def error_line(result):
    """The single line a CLI run that exited with code 2 printed on stderr."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_memory_stats_and_synchronize_go_to_torch_npu():
    out, _ = scenario(
        """
kind = resolve_kind("npu")
start = len(sys.modules["torch_npu"].CALLS)
kind.synchronize()
out["stats"] = kind.memory_stats()
out["start"] = start
""",
        FAKE_NPU_COUNT="1",
    )
    assert out["stats"] == {"allocated": 0, "max_allocated": 0, "reserved": 0}
    assert [call[0] for call in out["calls"][out["start"] :]] == [
        "synchronize",
        "memory_allocated",
        "max_memory_allocated",
        "memory_reserved",
    ]


# -- auto-detection ----------------------------------------------------------------------------

_AUTO = """
if sys.argv[1] == "cuda-present":
    type(kinds.get("cuda")).probe = lambda self: (True, "")
out["kind"] = resolve_kind().name
"""


def test_auto_detection_prefers_npu_even_when_cuda_looks_present():
    """transfer_to_npu makes CUDA look present on an NPU machine: NPU must win."""
    out, _ = scenario(_AUTO, "cuda-present", FAKE_NPU_COUNT="2")
    assert out["kind"] == "npu"


def test_auto_detection_without_npus_picks_cpu():
    out, stderr = scenario(_AUTO, "plain", FAKE_NPU_COUNT="0")
    assert out["kind"] == "cpu"
    assert "no NPU is usable" in stderr and "skipped npu" in stderr


# -- ASCEND_RT_VISIBLE_DEVICES is validated before any NPU call --------------------------------


@pytest.mark.parametrize("requested", ["npu", "auto"])
@pytest.mark.parametrize(
    "value, says",
    [("1,0", "ascending"), ("0,0", "twice"), ("0,a", "not a device id"), ("0,,1", "empty entry")],
)
def test_bad_visible_devices_fail_before_any_npu_call(requested, value, says):
    out, _ = scenario(
        """
try:
    out["kind"] = resolve_kind(sys.argv[1]).name
except UsageError as error:
    out["error"] = str(error)
""",
        requested,
        FAKE_NPU_COUNT="8",
        ASCEND_RT_VISIBLE_DEVICES=value,
    )
    assert "error" in out, out
    assert "ASCEND_RT_VISIBLE_DEVICES" in out["error"] and says in out["error"]
    assert not out["calls"], f"devicekit called the NPU runtime first: {out['calls']}"


# -- process group and backends -----------------------------------------------------------------


def test_init_process_group_binds_the_npu_before_anything_else():
    out, _ = scenario(
        """
devicekit.runtime.kind("npu")
start = len(sys.modules["torch_npu"].CALLS)
ctx = devicekit.init_distributed(options=devicekit.LaunchOptions(gpu=1))
out.update(mode=ctx.mode, index=ctx.device_index, start=start,
           backend=torch.distributed.get_backend(), device=str(devicekit.device()))
devicekit.destroy_process_group()
""",
        FAKE_NPU_COUNT="2",
    )
    assert out["mode"] == "single" and out["index"] == 1
    assert out["backend"] == "hccl" and out["device"] == "npu:1"
    calls = out["calls"][out["start"] :]
    assert calls.index(["set_device", 1]) < calls.index(["new_hccl_group", 1]), calls


def test_resolve_backend_maps_nccl_to_hccl_on_npu_with_one_warning():
    out, _ = scenario("""
import contextlib, io
kind = resolve_kind("npu")
with contextlib.redirect_stderr(io.StringIO()) as captured:
    out["backend"] = devicekit.distributed.resolve_backend(kind, "nccl")
out["warning"] = captured.getvalue()
""")
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


def test_check_without_usable_npu_says_so_in_one_line():
    line = error_line(
        run_python(["-m", "devicekit", "check", "--device", "npu"], FAKE_NPU_COUNT="0")
    )
    assert "no NPU is usable" in line and "npu-smi" in line


def test_npu_without_torch_npu_says_how_to_install():
    if importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("a real torch_npu is installed in this environment")
    out, _ = scenario(
        """
try:
    resolve_kind("npu")
except UsageError as error:
    out["error"] = str(error)
""",
        fake=False,
    )
    assert "torch_npu is not installed" in out["error"]
    assert "pip install 'devicekit[npu]'" in out["error"]


def test_torch_npu_without_cann_names_cann_and_set_env():
    line = error_line(
        run_python(
            ["-m", "devicekit", "check", "--device", "npu"], FAKE_NPU_IMPORT_ERROR=CANN_ERROR
        )
    )
    assert "CANN" in line and "libhccl.so" in line and "set_env.sh" in line


@pytest.mark.parametrize(
    "message",
    [
        "No module named 'yaml'",
        "/site-packages/torch_npu/_C.cpython-311-x86_64-linux-gnu.so: "
        "undefined symbol: _ZN3c104impl",
    ],
    ids=["missing-module", "undefined-symbol"],
)
def test_other_import_errors_are_not_blamed_on_cann(message):
    out, _ = scenario(
        """
out["state"] = kinds.get("npu").load_state()
""",
        FAKE_NPU_IMPORT_ERROR=message,
    )
    state, reason = out["state"]
    assert state == "import failed"
    assert message in reason and "set_env.sh" not in reason


# -- settings that decide speed: kernels, loss scaling ---------------------------------

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


@pytest.mark.parametrize(
    "chip, override, mode",
    [
        ("Ascend910B3", None, False),
        ("Ascend910_9391", None, False),  # A2, A3: binary kernels
        ("Ascend910A", None, None),  # 910A: CANN's default (kernels compiled on line) stands
        ("Ascend910B3", "1", True),
        ("Ascend910A", "0", False),
    ],
)
def test_binding_the_npu_sets_the_compile_mode_once(chip, override, mode):
    env = {"FAKE_NPU_COUNT": "2", "FAKE_NPU_NAME": chip}
    if override is not None:
        env["DEVICEKIT_NPU_JIT_COMPILE"] = override
    out, _ = scenario(_BIND, **env)
    calls = [call[0] for call in out["calls"][out["start"] :]]
    assert "is_jit_compile_false" not in calls  # it would initialise the device to answer
    expected = [] if mode is None else [["set_compile_mode", {"jit_compile": mode}]]
    assert [call for call in out["calls"] if call[0] == "set_compile_mode"] == expected
    assert calls[0] == "set_device" and calls.count("set_device") == 2


def test_a_bad_jit_compile_override_is_refused_before_any_npu_call():
    out, _ = scenario(_BIND, FAKE_NPU_COUNT="2", DEVICEKIT_NPU_JIT_COMPILE="yes")
    assert out["error"].startswith(
        "DEVICEKIT_NPU_JIT_COMPILE='yes' must be 0 (binary kernels) or 1"
    )
    assert out["calls"][out["start"] :] == []


def test_grad_scaler_is_torch_npus():
    out, _ = scenario(
        """
devicekit.runtime.kind("npu")
fp16 = devicekit.GradScaler(enabled=True, init_scale=1024, dynamic=False)
bf16 = devicekit.GradScaler(enabled=True, dtype="bfloat16")
out.update(cls=type(fp16).__module__ + "." + type(fp16).__qualname__,
           torch_scaler=isinstance(fp16, torch.amp.GradScaler),
           fp16=fp16.is_enabled(), scale=fp16.get_scale(), bf16=bf16.is_enabled())
""",
        FAKE_NPU_COUNT="1",
    )
    assert out["cls"] == "torch_npu.GradScaler" and out["torch_scaler"]
    assert (out["fp16"], out["scale"], out["bf16"]) == (True, 1024.0, False)
    assert ["amp.GradScaler", {"init_scale": 1024, "dynamic": False, "enabled": True}] in out[
        "calls"
    ]


def test_profile_uses_torch_npus_profiler_with_the_npu_activity(tmp_path):
    out, _ = scenario(
        """
import devicekit, torch
from devicekit import runtime
runtime.kind("npu")
with devicekit.profile(sys.argv[1], wait=0, warmup=1, active=2) as prof:
    for _ in range(3):
        torch.ones(4).sum()
        prof.step()
""",
        str(tmp_path),
        FAKE_NPU_COUNT="1",
    )
    calls = [call for call in out["calls"] if call[0].startswith("profiler.")]
    assert calls == [
        ["profiler.schedule", {"wait": 0, "warmup": 1, "active": 2, "repeat": 1}],
        ["profiler.tensorboard_trace_handler", str(tmp_path)],
        ["profiler.profile", ["CPU", "NPU"]],
    ]

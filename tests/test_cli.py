"""The devicekit command line: doctor's report and one-line errors with exit code 2.

The commands run in the test process (support.devicekit_in_process: devicekit's command
line itself, with the environment given); one bad input also runs as a real
`python -m devicekit` process, for the exit code and stderr a shell sees."""

import json
import subprocess
import sys

import pytest

from conftest import clean_environ
from devicekit.errors import UsageError
from support.devicekit_in_process import devicekit_in_process


def devicekit_cli(*args, **env):
    """`python -m devicekit ARGS` with the test environment plus `env`, run in-process."""
    return devicekit_in_process(args, ".", clean_environ(**env))


def test_doctor_json_explains_this_machine():
    result = devicekit_cli("doctor", "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["torch"].startswith("2.")
    assert info["torch_npu"]["state"] in ("not installed", "ok", "CANN missing", "import failed")
    assert (info["device"], info["backend"], info["devices_per_node"]) == ("cpu", "gloo", 1)
    assert info["launcher"].startswith("none")
    assert info["next"] == "python -m devicekit check --nproc-per-node 2"
    assert info["problems"] == []
    assert set(info["hccl"]) >= {"HCCL_CONNECT_TIMEOUT", "HCCL_IF_IP"}
    assert set(info["visible_devices"]) == {
        "ASCEND_RT_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
        "ZE_AFFINITY_MASK",
    }


def test_doctor_sees_the_launcher_and_reports_problems():
    env = {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "2",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": "x",
    }
    result = devicekit_cli("doctor", **env)
    assert result.returncode == 2
    assert "launcher     torchrun" in result.stdout
    assert "PROBLEM      MASTER_ADDR is not set" in result.stdout


def test_doctor_human_report_names_the_choice():
    result = devicekit_cli("doctor", "--device", "cpu")
    assert result.returncode == 0
    assert "chosen       cpu with backend gloo" in result.stdout
    assert "next         python -m devicekit check --nproc-per-node 2" in result.stdout


@pytest.mark.parametrize(
    "env, line",
    [
        (
            {"DEVICEKIT_CPU_BF16": "0"},
            "fp32 (AMP off: autocast(enabled=True) or --amp turns it on), NCHW",
        ),
        ({"DEVICEKIT_CPU_BF16": "1"}, "bfloat16 autocast, no loss scaling, channels_last"),
        (
            {"DEVICEKIT_CPU_BF16": "1", "DEVICEKIT_AMP_DTYPE": "float16"},
            "float16 autocast with loss scaling, channels_last",
        ),
    ],
    ids=["fp32", "bf16", "a-gpus-fp16"],
)
def test_doctor_says_which_precision_and_memory_format_scripts_get(env, line):
    """Each CPU policy, forced on any CPU, as doctor reports it (and --json), with the
    compiler devicekit.compile uses."""
    result = devicekit_cli("doctor", **env)
    assert result.returncode == 0, result.stdout
    assert f"precision    {line}\n" in result.stdout
    assert "compile      inductor\n" in result.stdout
    info = json.loads(devicekit_cli("doctor", "--json", **env).stdout)
    assert info["precision"]["loss_scaling"] is ("with loss scaling" in line), info["precision"]
    assert info["compile_backend"] == "inductor"


def test_doctor_names_a_bad_precision_variable_as_a_problem():
    result = devicekit_cli("doctor", DEVICEKIT_AMP_DTYPE="int8")
    assert result.returncode == 2
    assert (
        "PROBLEM      DEVICEKIT_AMP_DTYPE='int8' is not an AMP dtype: set float16 or bfloat16, "
        "or unset it for the cpu default\n"
    ) in result.stdout


@pytest.mark.parametrize(
    "args,env,needle",
    [
        (["check", "--device", "tpu"], {}, "unknown device 'tpu'"),
        (["check", "--device", "cuda"], {}, "no CUDA support"),
        (
            ["check"],
            {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_PORT": "1"},
            "MASTER_ADDR is not set",
        ),
        (
            ["check"],
            {
                "RANK": "2",
                "WORLD_SIZE": "2",
                "LOCAL_RANK": "0",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": "1",
            },
            "RANK=2 is not below WORLD_SIZE=2",
        ),
        (
            ["check", "--nproc-per-node", "2"],
            {
                "RANK": "0",
                "WORLD_SIZE": "1",
                "LOCAL_RANK": "0",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": "1",
            },
            "drop --nproc-per-node",
        ),
        (["check", "--dist-timeout", "0", "--nproc-per-node", "2"], {}, "--dist-timeout 0"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(args, env, needle):
    result = devicekit_cli(*args, **env)
    assert_one_line_and_exit_code_2(result, needle)


def test_a_real_command_with_bad_input_exits_2_with_one_line():
    """What a shell sees: the process's exit code 2 and one stderr line, no traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "devicekit", "check", "--device", "tpu"],
        env=clean_environ(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert_one_line_and_exit_code_2(result, "unknown device 'tpu'")


def assert_one_line_and_exit_code_2(result, needle):
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: ") and needle in lines[-1], result.stderr
    assert "Traceback" not in result.stderr


def test_a_single_process_joins_a_group_of_one_and_leaving_is_safe():
    import torch.distributed as dist

    import devicekit

    ctx = devicekit.init_distributed(device_type="cpu")
    assert (ctx.mode, ctx.world_size) == ("single", 1)
    assert dist.get_rank() == 0 and dist.get_world_size() == 1
    assert devicekit.init_distributed() == ctx  # a second call is the same run
    devicekit.destroy_process_group()
    devicekit.destroy_process_group()  # safe on every exit path
    assert not dist.is_initialized()


def test_a_timeout_that_is_not_positive_names_the_argument():
    import devicekit

    with pytest.raises(UsageError, match=r"^timeout=-1 must be a positive, finite number"):
        devicekit.init_distributed(timeout=-1)

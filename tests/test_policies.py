"""Every precision and memory-format policy devicekit takes from a machine, on any machine:
main.py, the GPT example and README's flat-API script, each under DDP and sharded (main.py
compiled too, under the CPU's two policies and the stand-in's), with the defaults of each
policy and no precision flag.

The CPU's two policies are forced with DEVICEKIT_CPU_BF16 (fp32 NCHW; bf16 autocast and
channels_last), a GPU's with DEVICEKIT_AMP_DTYPE=float16 on top (fp16 autocast, a GradScaler
that scales, channels_last), the NPU's on the npu stand-in (fp32 NCHW; fp16 and torch_npu's
GradScaler with --amp; eager where --compile finds no compiler). Each policy's scripts run
one after another in one process per rank (support/run_scripts.py), 2 ranks torchrun
starts: the claim is the scripts under the policy, not their processes starting."""

import re

import pytest

from package_checks import library_example
from support.launchers import child_env
from support.paths import REPO
from support.runs import tiny_args
from support.script_groups import run_group

pytestmark = pytest.mark.slow
TIMEOUT_S = 400  # one group's scripts, one after another
MAIN = REPO / "main.py"
GPT = REPO / "examples" / "gpt_pretrain.py"
MAIN_ARGS = tiny_args(epochs=1, steps=2, val_steps=1)
GPT_ARGS = ["--iters", "3", "--batch-size", "4", "--log-every", "1", "--save-every", "100"]
CPU_POLICIES = {  # name: (its variables, what main.py says it trains in)
    "fp32": ({"DEVICEKIT_CPU_BF16": "0"}, "fp32"),
    "bf16": ({"DEVICEKIT_CPU_BF16": "1"}, "AMP bfloat16, channels_last"),
    "gpu-fp16": (
        {"DEVICEKIT_CPU_BF16": "1", "DEVICEKIT_AMP_DTYPE": "float16"},
        "AMP float16, channels_last",
    ),
}
# Compiled under both CPU policies and on the stand-in (its fallback); a GPU's policy
# compiles with the same inductor as the CPU's, and each compile costs a rank ~10 s of CPU.
COMPILED = {"fp32", "bf16", "npu", "npu-amp"}
NPU_POLICIES = {"npu": ([], "fp32"), "npu-amp": (["--amp"], "AMP float16")}
LOSS = re.compile(r"^iter (\d+) loss (\d+\.\d+)", re.M)
DONE = re.compile(r"^=> rank (\d)/2 done: weights ([0-9a-f]{16})$", re.M)
TINY_DONE = re.compile(r"^rank (\d) of 2 on (\w+(?::\d)?): loss (\d+\.\d+)$", re.M)


def entries(folder, policy, variables, main_flags=()):
    """One policy's scripts: main.py under DDP and sharded, eager and compiled; the GPT
    example under DDP and sharded; README's script (DDP)."""

    tiny = folder / "tiny.py"
    tiny.write_text(library_example((REPO / "README.md").read_text()))
    found = []
    for strategy in ("ddp", "shard"):
        for compiled in (False, True)[: 1 + (policy in COMPILED)]:
            name = f"main-{policy}-{strategy}{'-compiled' if compiled else ''}"
            args = [*MAIN_ARGS, *main_flags, "--output-dir", folder / name]
            args += ["--shard"] * (strategy == "shard") + ["--compile"] * compiled
            found.append((name, MAIN, args, variables))
        out = folder / f"gpt-{policy}-{strategy}" / "gpt.pt"
        found.append(
            (
                f"gpt-{policy}-{strategy}",
                GPT,
                [*GPT_ARGS, "--strategy", strategy, "--out", out],
                variables,
            )
        )
    found.append((f"tiny-{policy}", tiny, [], variables))
    return found


@pytest.fixture(scope="module")
def policy_runs(tmp_path_factory):
    """{"cpu": the CPU policies' group, "npu": the stand-in's}: each a torchrun of 2 ranks
    that run its policies' scripts one after another."""
    runs = {}
    for device, policies in (("cpu", CPU_POLICIES), ("npu", NPU_POLICIES)):
        folder = tmp_path_factory.mktemp(f"{device}_policies")
        plan = []
        for policy, (setting, _) in policies.items():
            if device == "cpu":
                plan += entries(folder, policy, setting)
            else:  # the GPT example and README's script have no --amp: the default only
                found = entries(folder, policy, {}, setting)
                plan += [e for e in found if policy == "npu" or e[0].startswith("main")]
        env = (
            child_env(DEVICEKIT_SIMULATE="npu", DEVICEKIT_DEVICE="npu") if device == "npu" else None
        )
        runs[device] = run_group(folder, "torchrun", plan, TIMEOUT_S, environ=env)
    return runs


def group_and_says(runs, policy):
    if policy in CPU_POLICIES:
        return runs["cpu"], CPU_POLICIES[policy][1], "cpu"
    return runs["npu"], NPU_POLICIES[policy][1], "npu"


ALL = [*CPU_POLICIES, *NPU_POLICIES]
MAIN_RUNS = [
    pytest.param(
        policy, strategy, compiled, id=f"{policy}-{strategy}-{'compiled' if compiled else 'eager'}"
    )
    for policy in ALL
    for strategy in ("ddp", "shard")
    for compiled in (False, True)[: 1 + (policy in COMPILED)]
]


@pytest.mark.parametrize("policy, strategy, compiled", MAIN_RUNS)
def test_main_trains_under_each_policy_with_no_precision_flag(
    policy_runs, policy, strategy, compiled
):
    """main.py trains 2 ranks to the same weights, in the policy's precision and memory
    format, said on its first line; --compile on the stand-in says once that it runs eagerly."""
    group, says, device = group_and_says(policy_runs, policy)
    name = f"main-{policy}-{strategy}{'-compiled' if compiled else ''}"
    result = group.ran(name)
    first = next(line for line in result.stdout.splitlines() if line.startswith("=> tinynet"))
    assert f" on {device} (" in first and first.split("per process, ")[-1].startswith(says), first
    assert ("channels_last" in first) is ("channels_last" in says), first
    done = dict(DONE.findall(result.stdout))
    assert sorted(done) == ["0", "1"] and len(set(done.values())) == 1, result.stdout
    eager = "no compiler for npu here" in result.stderr
    assert result.stderr.count("the model is not compiled") == (compiled and device == "npu"), (
        result.stderr
    )
    assert not eager or device == "npu"


@pytest.mark.parametrize("policy", ["fp32", "bf16", "gpu-fp16", "npu"])
def test_the_gpt_example_shards_to_ddps_losses_under_each_policy(policy_runs, policy):
    """The GPT example's losses, sharded, are DDP's under every policy (its shards stay
    fp32: autocast sets the precision); a CPU's three policies give three different losses,
    so each really ran in its own precision."""
    group, _, _ = group_and_says(policy_runs, policy)
    runs = {s: dict(LOSS.findall(group.ran(f"gpt-{policy}-{s}").stdout)) for s in ("ddp", "shard")}
    assert sorted(runs["ddp"]) == ["0", "1", "2"], runs
    for it, loss in runs["ddp"].items():
        assert float(runs["shard"][it]) == pytest.approx(float(loss), rel=1e-5), runs
    if policy in CPU_POLICIES:
        last = {p: LOSS.findall(group.ran(f"gpt-{p}-ddp").stdout)[-1] for p in CPU_POLICIES}
        assert len(set(last.values())) == len(CPU_POLICIES), last


@pytest.mark.parametrize("policy", ["fp32", "bf16", "gpu-fp16", "npu"])
def test_readmes_flat_api_script_trains_under_each_policy(policy_runs, policy):
    group, _, device = group_and_says(policy_runs, policy)
    result = group.ran(f"tiny-{policy}")
    found = {rank: (on, float(loss)) for rank, on, loss in TINY_DONE.findall(result.stdout)}
    assert sorted(found) == ["0", "1"], result.stdout
    assert {on.split(":")[0] for on, _ in found.values()} == {device}, found
    assert all(loss < 0.05 for _, loss in found.values()), found

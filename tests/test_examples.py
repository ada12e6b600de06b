"""The scripts in examples/ -- user scripts in four common styles, ported to devicekit's
flat API -- run unchanged under every launcher.

Each runs with 1 and 2 ranks, and each launcher (`python script.py`, torchrun,
`torch.distributed.launch`, `launch/run_8p.sh` and Ascend's RANK_ID/RANK_SIZE loop) starts
1 and 2 ranks, in a pairwise plan (PLAN), with no branch in the script: every run
finishes, every rank ends with the same weights,
and where the math allows (no batch norm, fp32) 2 ranks x B/2 end where 1 rank x B does.
(A rank that raises, under each launcher: tests/test_faults.py, with main.py.) Children
run under tests/support/processes.py: own session, output in files, a timeout on every
wait; tests/support/launchers.py builds every launcher's command line.
"""

import re
import sys

import pytest
import torch

from devicekit.environments import find_free_port
from support.launchers import output_text, start
from support.paths import REPO
from support.processes import Processes, describe

RUN_TIMEOUT_S = 240

pytestmark = pytest.mark.slow

# Each example with short arguments; {batch} is the per-process batch, {out} the checkpoint.
EXAMPLES = {
    "spawn_config": ["--epochs", "1", "--batch-size", "{batch}", "--out", "{out}"],
    "launch_local_rank": ["--steps", "12", "--batch-size", "{batch}", "--out", "{out}"],
    "gpt_pretrain": [
        "--iters",
        "8",
        "--batch-size",
        "{batch}",
        "--save-every",
        "4",
        "--log-every",
        "1",
        "--no-amp",
        "--out",
        "{out}",
    ],
    "finetune_sampler": ["--epochs", "1", "--batch-size", "{batch}", "--out", "{out}"],
}
GLOBAL_BATCH = {
    "spawn_config": 16,
    "launch_local_rank": 32,
    "gpt_pretrain": 12,  # 2 and 3 ranks split it evenly (the sharded run resumes on 3)
    "finetune_sampler": 32,
}
# Without batch norm, in fp32, the data-parallel sum is the single-process one, up to the
# order of float additions: (rtol, atol) per example. AdamW turns that rounding noise on
# gradients that are zero in exact arithmetic (attention's key bias) into steps of the
# learning rate's size, so the GPT's weights agree to 1e-3, not 1e-5.
EQUIVALENT = {
    "spawn_config": (1e-4, 1e-5),
    "launch_local_rank": (1e-4, 1e-5),
    "gpt_pretrain": (1e-3, 1e-3),
}
LAUNCHERS = ["python", "torchrun", "launch", "run_8p", "ascend"]
DONE = re.compile(r"^rank (\d+)/(\d+) done: weights ([0-9a-f]{16})$", re.M)
# The npu stand-in, its device kind forced: a run that found no npu would fail, not train on
# the CPU.
NPU_STAND_IN = {"DEVICEKIT_SIMULATE": "npu", "DEVICEKIT_DEVICE": "npu"}
LOSS = re.compile(r"^iter (\d+) loss (\d+\.\d+)", re.M)
LOGGED = {}


def start_example(procs, launcher, example, args, nproc, tmp_path, **extra):
    """Start examples/`example`.py with `args` the way `launcher` does with `nproc` ranks
    (`extra`: start()'s keywords and variables). run_8p.sh is given its master port:
    finding a free one itself costs a Python that imports torch, and the README's demo run
    (tests/test_train_runs.py) covers that path."""
    script = REPO / "examples" / f"{example}.py"
    if launcher == "run_8p":
        extra.setdefault("MASTER_PORT", find_free_port())
    return start(procs, launcher, script, args, nproc, tmp_path, **extra)


def done_lines(results, tmp_path, launcher):
    """{rank: (world size, weights)} from every rank's last line."""
    text = output_text(results, tmp_path, launcher)  # run_8p: ranks but 0 write only their log
    return {int(m.group(1)): (int(m.group(2)), m.group(3)) for m in DONE.finditer(text)}


def run_example(name, launcher, nproc, tmp_path, batch=None):
    """Run example `name` to its end; return (its checkpoint, {rank: (world, weights)}), and
    keep what it printed in LOGGED[(name, launcher, nproc)]."""
    batch = GLOBAL_BATCH[name] // nproc if batch is None else batch
    out = tmp_path / f"{name}.pt"
    args = [a.format(batch=batch, out=out) for a in EXAMPLES[name]]
    with Processes(tmp_path / "processes") as procs:
        started = start_example(procs, launcher, name, args, nproc, tmp_path)
        results = procs.finish_all(started, RUN_TIMEOUT_S)
    assert all(r.returncode == 0 for r in results), describe(results)
    ranks = done_lines(results, tmp_path, launcher)
    LOGGED[name, launcher, nproc] = output_text(results, tmp_path, launcher)
    assert sorted(ranks) == list(range(nproc)), describe(results)
    assert {world for world, _ in ranks.values()} == {nproc}, ranks
    assert len({weights for _, weights in ranks.values()}) == 1, (
        f"ranks ended with different weights: {ranks}"
    )
    assert out.is_file(), f"{out} was not written\n" + describe(results)
    return torch.load(out, weights_only=True), ranks


# Pairwise, not the full product: each launcher starts 1 rank and 2 ranks once, each
# example runs with 1 and 2 ranks, and the examples of EQUIVALENT have both world sizes
# (the launcher does not change the weights: test_train_runs.py proves it for main.py).
PLAN = [
    ("spawn_config", "python", 1),
    ("launch_local_rank", "torchrun", 1),
    ("gpt_pretrain", "launch", 1),
    ("finetune_sampler", "run_8p", 1),
    ("spawn_config", "ascend", 1),
    ("spawn_config", "torchrun", 2),
    ("launch_local_rank", "launch", 2),
    ("gpt_pretrain", "run_8p", 2),
    ("finetune_sampler", "ascend", 2),
    ("launch_local_rank", "python", 2),
]


@pytest.fixture(scope="module")
def planned_runs(tmp_path_factory):
    """{(example, launcher, nproc): (checkpoint, ranks)}, each run once when first asked."""
    runs = {}

    def get(name, launcher, nproc):
        key = (name, launcher, nproc)
        if key not in runs:
            folder = tmp_path_factory.mktemp(f"{name}-{launcher}-{nproc}")
            runs[key] = run_example(name, launcher, nproc, folder)
        return runs[key]

    return get


def test_the_plan_covers_every_example_and_launcher_with_1_and_2_ranks():
    for nproc in (1, 2):
        assert {launcher for _, launcher, n in PLAN if n == nproc} == set(LAUNCHERS)
        assert {name for name, _, n in PLAN if n == nproc} == set(EXAMPLES)


@pytest.mark.parametrize(("name", "launcher", "nproc"), PLAN)
def test_every_example_runs_under_the_launchers_of_the_plan(name, launcher, nproc, planned_runs):
    planned_runs(name, launcher, nproc)


def planned(name, nproc):
    """The first run of the plan of example `name` with `nproc` ranks."""
    return next(key for key in PLAN if key[0] == name and key[2] == nproc)


@pytest.mark.parametrize("name", EQUIVALENT)
def test_two_ranks_with_half_the_batch_equal_one_rank(name, planned_runs):
    one, _ = planned_runs(*planned(name, 1))
    two, _ = planned_runs(*planned(name, 2))
    one, two = one["model"], two["model"]
    assert one.keys() == two.keys()
    rtol, atol = EQUIVALENT[name]
    for key in one:
        torch.testing.assert_close(
            two[key], one[key], rtol=rtol, atol=atol, msg=lambda m, key=key: f"{key}: {m}"
        )


def test_gpt_resumes_from_its_periodic_checkpoint(tmp_path, planned_runs):
    """8 iterations straight equal 4, a checkpoint, and a resumed run of the last 4 (under
    Ascend's RANK_ID loop, then launch/run_8p.sh: launchers that start no Python of their
    own; the launcher does not change the weights)."""
    straight, _ = planned_runs(*planned("gpt_pretrain", 2))
    out = tmp_path / "resumed" / "gpt_pretrain.pt"
    out.parent.mkdir()
    common = ["--batch-size", "6", "--save-every", "4", "--no-amp", "--out", str(out)]
    with Processes(tmp_path / "resumed" / "processes") as procs:
        first = start_example(
            procs, "ascend", "gpt_pretrain", ["--iters", "4", *common], 2, tmp_path
        )
        results = procs.finish_all(first, RUN_TIMEOUT_S)
        assert all(r.returncode == 0 for r in results), describe(results)
        second = start_example(
            procs, "run_8p", "gpt_pretrain", ["--iters", "8", "--resume", *common], 2, tmp_path
        )
        results = procs.finish_all(second, RUN_TIMEOUT_S)
    assert results[0].returncode == 0, describe(results)
    resumed = torch.load(out, weights_only=True)
    assert resumed["iter"] == 8
    for key, value in straight["model"].items():
        torch.testing.assert_close(resumed["model"][key], value, rtol=0, atol=0)


def losses(text):
    return {int(it): float(loss) for it, loss in LOSS.findall(text)}


def test_sharded_gpt_on_the_npu_stand_in_follows_ddp_and_resumes_on_three_cpu_ranks(
    tmp_path, planned_runs
):
    """--strategy shard (devicekit.shard, fp32) under Ascend's RANK_ID loop on 2 ranks of the
    npu stand-in has DDP's losses (the plan's 2-rank CPU run, same global batch); its
    checkpoint folder, saved at iteration 4, resumes on the other kind (the CPU) as a shell
    loop starts 3 ranks (RANK/WORLD_SIZE) with DDP's losses for the last 4, and loads into a
    plain model in this one process with DDP's final weights. (Per-rank launchers: no
    launcher process of their own to import torch.)"""
    import devicekit

    sys.path.insert(0, str(REPO / "examples"))
    try:
        from gpt_pretrain import TinyGPT
    finally:
        sys.path.remove(str(REPO / "examples"))
    key = planned("gpt_pretrain", 2)
    ddp, _ = planned_runs(*key)
    reference = losses(LOGGED[key])
    out = tmp_path / "sharded"
    common = ["--strategy", "shard", "--save-every", "4", "--log-every", "1", "--no-amp"]
    with Processes(tmp_path / "processes") as procs:
        first = start_example(
            procs,
            "ascend",
            "gpt_pretrain",
            [*common, "--iters", "4", "--batch-size", "6", "--out", out],
            2,
            tmp_path,
            name="npu",
            **NPU_STAND_IN,
        )
        results = procs.finish_all(first, RUN_TIMEOUT_S)
        assert all(r.returncode == 0 for r in results), describe(results)
        sharded = losses(output_text(results, tmp_path, "ascend"))
        assert sorted(p.name for p in out.iterdir())[:1] == [".metadata"], list(out.iterdir())
        second = start_example(
            procs,
            "env",
            "gpt_pretrain",
            [*common, "--iters", "8", "--batch-size", "4", "--out", out, "--resume"],
            3,
            tmp_path,
        )
        results = procs.finish_all(second, RUN_TIMEOUT_S)
    assert all(r.returncode == 0 for r in results), describe(results)
    text = output_text(results, tmp_path, "env")
    resumed = losses(text)
    assert sorted(sharded) == [0, 1, 2, 3] and sorted(resumed) == [4, 5, 6, 7], text
    for it, loss in {**sharded, **resumed}.items():
        assert loss == pytest.approx(reference[it], rel=1e-4), (it, sharded, resumed, reference)
    ranks = {int(m.group(1)): m.group(3) for m in DONE.finditer(text)}
    assert sorted(ranks) == [0, 1, 2] and len(set(ranks.values())) == 1, text
    assert not list(tmp_path.glob("sharded.*")), "a save left its partial or previous folder"

    model = TinyGPT()
    values = devicekit.load_checkpoint(out, into={"model": model})
    assert values["iter"] == 8, values
    rtol, atol = EQUIVALENT["gpt_pretrain"]
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, ddp["model"][name], rtol=rtol, atol=atol)


def test_under_a_memory_cap_ddp_runs_out_and_shard_trains(tmp_path):
    """Each of 2 npu stand-in devices holds 16 MiB: the GPT of 4 blocks of width 128 (0.8 M
    parameters, 3.2 MB in fp32) needs about 20 MB a rank under DDP (its parameters, gradient
    buckets and two AdamW moments whole) and 14 MB sharded. DDP ends with exit code 2 and
    one line naming the NPU that ran out (launch()'s: `python gpt_pretrain.py`); --strategy
    shard trains (as Ascend's RANK_ID loop starts it: no launcher process to import torch)."""
    args = ["--dim", "128", "--layers", "4", "--iters", "2", "--batch-size", "6"]
    with Processes(tmp_path / "processes") as procs:
        started = {
            strategy: start_example(
                procs,
                launcher,
                "gpt_pretrain",
                [*args, "--strategy", strategy, "--out", tmp_path / strategy],
                2,
                tmp_path / strategy,
                name=strategy,
                DEVICEKIT_SIMULATE_MEMORY="16MiB",
                **NPU_STAND_IN,
            )
            for strategy, launcher in (("ddp", "python"), ("shard", "ascend"))
        }
        [ddp] = procs.finish_all(started["ddp"], RUN_TIMEOUT_S)
        shard = procs.finish_all(started["shard"], RUN_TIMEOUT_S)
    assert ddp.returncode == 2 and "Traceback" not in ddp.stderr, describe([ddp])
    # One line for the run, from the rank that ran out first, naming its NPU (both ranks
    # run out here: they hold the same).
    lines = [line for line in ddp.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, lines
    assert re.fullmatch(
        r"error: out of memory: NPU out of memory\. Tried to allocate [\d.]+ [KM]iB \(NPU "
        r"[01]; 16\.00 MiB total capacity; [\d.]+ MiB already allocated; [\d.]+ [KM]iB "
        r"free; the stand-in's capacity, DEVICEKIT_SIMULATE_MEMORY\); use a smaller batch, "
        r"or split the model, its gradients and optimizer state across the ranks with "
        r"devicekit\.shard\(model\) \(activation_checkpointing=True saves more\)",
        lines[0],
    ), lines
    assert all(r.returncode == 0 for r in shard), describe(shard)
    text = "".join(r.stdout for r in shard)
    assert sorted(int(m.group(1)) for m in DONE.finditer(text)) == [0, 1], text

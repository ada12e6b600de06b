"""Run every benchmark, print one table and write JSON.

    python benchmarks/run.py [--repeats 3] [--out benchmarks/results.json]

Each figure is a ratio of two runs made side by side in this one invocation (the order
alternates between repeats, and the median is reported), so a noisy machine affects
both sides alike. No figure here is a pass/fail test: the goals are printed beside them.
"""

import argparse
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
TIMEOUT = 900


def environ(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_", "OMP_NUM_THREADS",
                                "TORCHELASTIC", "LOCAL_WORLD_SIZE", "GROUP_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run(cmd, env=None, cwd=ROOT):
    result = subprocess.run(cmd, cwd=cwd, env=env or environ(), capture_output=True, text=True,
                            timeout=TIMEOUT)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result.stdout


def result_of(stdout):
    line = next(line for line in stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])["images_per_sec"]


def torchrun(nproc, *args):
    return [PY, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]


def main_py_rate(launcher_cmd, train_args, env=None):
    """images/s that main.py measured (after its warm-up steps) in its metrics.jsonl."""
    with tempfile.TemporaryDirectory() as out:
        run(launcher_cmd + ["main.py", *train_args, "--output-dir", out], env=env)
        with open(os.path.join(out, "metrics.jsonl")) as handle:
            return json.loads(handle.readlines()[-1])["images_per_sec"]


def side_by_side(baseline, candidate, repeats):
    """Median of each over `repeats`, alternating which runs first."""
    base, cand = [], []
    for repeat in range(repeats):
        pair = [(base, baseline), (cand, candidate)]
        for store, fn in (pair if repeat % 2 == 0 else pair[::-1]):
            store.append(fn())
    b, c = statistics.median(base), statistics.median(cand)
    return {"baseline": b, "candidate": c, "ratio": c / b, "baseline_runs": base,
            "candidate_runs": cand}


def train_args(arch, size, batch, steps, workers, *extra):
    return ["--dummy", "-a", arch, "--image-size", str(size), "-b", str(batch), "-j", str(workers),
            "--epochs", "1", "--steps-per-epoch", str(steps), "--val-steps", "1", "-p", "1000",
            *extra]


def cpu_defaults():
    """(amp, channels_last) that main.py picks on this CPU."""
    code = ("import devicekit; k = devicekit.resolve_kind('cpu'); a = k.default_amp(); "
            "print(int(a), int(k.prefers_channels_last(a)))")
    amp, cl = run([PY, "-c", code]).split()
    return amp == "1", cl == "1"


def cpu_flags():
    """(main.py flags, plain-loop flags) that give both the precision main.py picks here."""
    amp, cl = cpu_defaults()
    return ((["--amp"] if amp else ["--no-amp"]) + (["--channels-last"] if cl else ["--no-channels-last"]),
            (["--amp"] if amp else []) + (["--channels-last"] if cl else []),
            f"amp={amp}, channels_last={cl}")


OVERHEAD_STEPS = 60  # 55 timed steps: the goal is within 2 %, so each run must be long


def overhead(repeats, main_py_ddp):
    flags, plain_flags, precision = cpu_flags()
    if main_py_ddp:
        plain_flags = plain_flags + ["--main-py-ddp"]
    common = ["--image-size", "64", "--batch-size", "32", "--workers", "1",
              "--steps", str(OVERHEAD_STEPS)]
    ddp = "DDP set as main.py sets it" if main_py_ddp else "DDP defaults"
    return side_by_side(
        lambda: result_of(run(torchrun(2, "benchmarks/plain_ddp.py", "--arch", "resnet18",
                                       *common, *plain_flags))),
        lambda: main_py_rate(torchrun(2), train_args("resnet18", 64, 32, OVERHEAD_STEPS, 2, *flags)),
        repeats) | {"what": f"main.py / plain loop with {ddp}, resnet18 64px, batch 32, "
                            f"2 ranks, 1 loader worker each, {precision}", "goal": ">= 0.98"}


def against_reference(arch, size, batch, steps, repeats):
    return side_by_side(
        lambda: result_of(run([PY, "benchmarks/reference_loop.py", "--arch", arch, "--image-size",
                               str(size), "--batch-size", str(batch), "--workers", "2",
                               "--steps", str(steps)])),
        lambda: main_py_rate([PY], train_args(arch, size, batch, steps, 2)),
        repeats) | {"what": f"main.py defaults / reference-style loop, {arch} {size}px, batch "
                            f"{batch}, 1 process", "goal": ">= 1.25"}


SCALING_BATCH = 128  # global: 64 images per rank on 2 ranks


def scaling(repeats, threads_per_rank):
    """main.py on 2 ranks / on 1 rank at the same global batch. Synthetic samples cost
    ~35 us each, so the data is made in the training process (-j 0) and every core trains."""
    args = train_args("resnet18", 64, SCALING_BATCH, 25, 0)
    if threads_per_rank:
        env = environ(OMP_NUM_THREADS=threads_per_rank)
        what = f"{threads_per_rank} thread per rank (2 ranks use twice the cores)"
    else:
        env = environ()
        what = "cores split over the ranks (2 ranks use the same cores as 1)"
    return side_by_side(
        lambda: main_py_rate([PY], args, env=env),
        lambda: main_py_rate(torchrun(2), args, env=env),
        repeats) | {"what": f"2 ranks / 1 rank, resnet18 64px, global batch {SCALING_BATCH}, "
                            + what, "goal": ">= 1.8" if threads_per_rank else "report"}


def scaling_ceiling(repeats):
    """The same 2 ranks / 1 rank with no gradient all-reduce: what the cores give when the
    collective costs nothing, so the gap to `scaling` is the all-reduce's share."""
    _, plain_flags, _ = cpu_flags()
    args = ["benchmarks/plain_ddp.py", "--arch", "resnet18", "--image-size", "64", "--batch-size",
            str(SCALING_BATCH), "--workers", "0", "--steps", "25", "--main-py-ddp", *plain_flags]
    env = environ(OMP_NUM_THREADS=1)
    return side_by_side(
        lambda: result_of(run(torchrun(1, *args), env=env)),
        lambda: result_of(run(torchrun(2, *args, "--skip-allreduce"), env=env)),
        repeats) | {"what": "compute-only ceiling: plain loop, 2 ranks without the gradient "
                            "all-reduce / 1 rank, 1 thread per rank", "goal": "report"}


def compiled(repeats):
    args = train_args("resnet18", 64, 32, 30, 0)
    return side_by_side(
        lambda: main_py_rate([PY], args),
        lambda: main_py_rate([PY], args + ["--compile"]),
        repeats) | {"what": "main.py --compile / main.py eager, resnet18 64px, batch 32, "
                            "1 process, after 5 warm-up steps", "goal": "report"}


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def seconds_to_first_step(cmd, env=None):
    """Seconds from starting `cmd` to the first progress line of rank 0."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.Popen(cmd + ["--output-dir", out], cwd=ROOT, env=env or environ(),
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                start_new_session=True)
        try:
            for line in proc.stdout:
                if line.startswith("Epoch: [0]["):
                    return time.perf_counter() - start
        finally:
            proc.kill()
            proc.wait(timeout=60)
            subprocess.run(["pkill", "-f", out], check=False)
    raise RuntimeError(f"{cmd} printed no progress line")


def startup(repeats):
    args = ["main.py", *train_args("tinynet", 32, 16, 3, 0, "--num-classes", "10"), "-p", "1"]
    launchers = {
        "torchrun": lambda: torchrun(2, *args),
        "torch.distributed.launch": lambda: [PY, "-m", "torch.distributed.launch", "--nproc_per_node",
                                             "2", "--master_port", str(free_port()), *args],
        "spawn": lambda: [PY, *args, "--multiprocessing-distributed", "--nproc-per-node", "2"],
        "run_8p.sh": lambda: ["bash", "launch/run_8p.sh", *args[1:]],
    }
    figures = {}
    for name, cmd in launchers.items():
        env = environ(NPROC_PER_NODE=2, LOG_DIR=tempfile.mkdtemp())
        figures[name] = statistics.median(seconds_to_first_step(cmd(), env) for _ in range(repeats))
    # In one process, after torch: the wall time of two interpreters differs by more than this.
    code = ("import time, torch; t = time.perf_counter(); import devicekit; "
            "print(time.perf_counter() - t)")
    figures["import devicekit over import torch (s)"] = statistics.median(
        float(run([PY, "-c", code])) for _ in range(max(5, repeats)))
    return figures


def collectives():
    report = json.loads(run([PY, "-m", "devicekit", "check", "--json", "--device", "cpu",
                             "--nproc-per-node", "2"]))
    return report["bandwidth"]


def machine():
    import torch

    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                  if line.startswith("model name")), platform.processor())
    return {"cpu": model, "cores": len(os.sched_getaffinity(0)), "python": platform.python_version(),
            "torch": torch.__version__, "accelerator": str(torch.accelerator.current_accelerator()),
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def gpu(repeats):
    import torch

    accelerator = torch.accelerator.current_accelerator()
    if accelerator is None or accelerator.type != "cuda":
        return {"skipped": "no CUDA device on this machine"}
    return side_by_side(
        lambda: result_of(run([PY, "benchmarks/reference_loop.py", "--arch", "resnet50",
                               "--image-size", "224", "--batch-size", "256", "--workers", "8",
                               "--steps", "30", "--device", "cuda"])),
        lambda: main_py_rate([PY], train_args("resnet50", 224, 256, 30, 8, "--amp",
                                              "--channels-last")),
        repeats) | {"what": f"resnet50 224px batch 256 on {torch.cuda.get_device_name()}: "
                            "main.py AMP+channels_last / reference-style fp32 loop"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results.json"))
    args = parser.parse_args()
    results = {"machine": machine()}
    steps = [
        # A 2 % goal needs more repeats than the others.
        ("1. layer overhead", lambda: overhead(args.repeats + 2, main_py_ddp=False)),
        ("1. layer overhead, same DDP settings",
         lambda: overhead(args.repeats + 2, main_py_ddp=True)),
        ("2. vs reference, resnet18", lambda: against_reference("resnet18", 64, 32, 20, args.repeats)),
        ("2. vs reference, resnet50", lambda: against_reference("resnet50", 64, 16, 12, args.repeats)),
        ("3. scaling, 1 thread per rank", lambda: scaling(args.repeats, 1)),
        ("3. scaling ceiling without all-reduce", lambda: scaling_ceiling(args.repeats)),
        ("3. scaling, cores split", lambda: scaling(args.repeats, 0)),
        ("--compile", lambda: compiled(args.repeats)),
        ("4. start-up", lambda: startup(args.repeats)),
        ("5. collectives (gloo)", collectives),
        ("6. GPU", lambda: gpu(args.repeats)),
    ]
    for name, fn in steps:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results[name] = fn()
        print(json.dumps(results[name]), file=sys.stderr, flush=True)
        with open(args.out, "w") as handle:  # after every step: a late failure loses nothing
            json.dump(results, handle, indent=2)
    print(format_table(results))
    print(f"\nJSON: {args.out}")


def format_table(results):
    m = results["machine"]
    lines = [f"machine: {m['cpu']}, {m['cores']} cores, torch {m['torch']}, "
             f"accelerator {m['accelerator']}, {m['when']}", "",
             "| benchmark | baseline img/s | devicekit img/s | ratio | goal |", "|---|---|---|---|---|"]
    for name, value in results.items():
        if isinstance(value, dict) and "ratio" in value:
            lines.append(f"| {name}: {value['what']} | {value['baseline']:.1f} | "
                         f"{value['candidate']:.1f} | {value['ratio']:.2f} | {value.get('goal', '')} |")
    lines += ["", "| start-up | seconds |", "|---|---|"]
    for name, seconds in results["4. start-up"].items():
        lines.append(f"| {name} | {seconds:.2f} |")
    lines += ["", "| all_reduce size | busbw GB/s |", "|---|---|"]
    for row in results["5. collectives (gloo)"]:
        lines.append(f"| {row['bytes']} B | {row['busbw_gbps']:.3f} |")
    gpu_result = results["6. GPU"]
    lines.append("")
    lines.append(f"GPU: {gpu_result.get('skipped') or gpu_result['what']}")
    return "\n".join(re.sub(r"\s+\|", " |", line) for line in lines)


if __name__ == "__main__":
    main()

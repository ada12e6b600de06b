#!/usr/bin/env bash
# The GPU proof, in one command: whoever first has a CUDA GPU runs this first
# (docs/performance.md, "GPU proof").
#
#     bash benchmarks/gpu.sh                                # figures in benchmarks/gpu_results/
#     GPU_RESULTS_DIR=/some/folder bash benchmarks/gpu.sh   # or in that folder
#
# 1. `python -m pytest tests/test_gpu.py -m gpu -rs`: the GPU tests (devicekit's device
#    functions, fp16/bf16 AMP, DDP over nccl, checkpoints, `devicekit check`, main.py, a
#    ported script, devicekit.shard over nccl, running out of memory). Only that file is
#    collected: the docs tools the other test files import need not be there. About
#    2.5 minutes on an H200; stopped at 3.5.
# 2. `python benchmarks/run.py --only gpu --pairs 3`: main.py's ResNet-50 step (224 px,
#    batch 256, AMP fp16 + channels_last) against the reference example's step and against
#    main.py in fp32 NCHW, 3 interleaved rounds of 30 steps each. About 3.5 minutes on an
#    H200; stopped at 4 min 10 s.
# About 6 minutes in all, stopped before 8 (a stopped stage gets SIGINT, which
# stops the processes it started, then SIGKILL a minute later).
#
# What lands in the folder: machine.txt (the GPUs, driver, torch, CUDA, cuDNN and NCCL
# versions), pytest.txt (the tests' output, skip reasons included), pytest.xml (JUnit, with
# check's bus bandwidth as properties), results.json (run.py's figures and every run) and
# table.md (run.py's table). README's hardware list is filled from them.
#
# Without a CUDA GPU (or without the test extra) it refuses in one line, exit code 2,
# before anything runs. Exit code 1: a stage failed or ran out of time (its figures, if
# any, are still in the folder).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python}
OUT=${GPU_RESULTS_DIR:-benchmarks/gpu_results}
PAIRS=${GPU_BENCH_PAIRS:-3}
TESTS_LIMIT_S=210
BENCH_LIMIT_S=250

# One line on stdout: what is missing (exit 1), or nothing. Warnings go nowhere.
missing=$(
    "$PYTHON" - 2>/dev/null <<'EOF'
import importlib.util
import sys

try:
    import torch
except Exception as error:
    print(f"torch does not import ({type(error).__name__}: {error})")
    sys.exit(1)
if not torch.cuda.is_available():
    build = f"a CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU-only build"
    print(
        f"no CUDA GPU: torch.cuda.is_available() is False here (torch {torch.__version__}, "
        f"{build}); run it on a machine with an NVIDIA GPU and a CUDA build of torch"
    )
    sys.exit(1)
needed = ("pytest", "xdist", "hypothesis", "libcst")
absent = [name for name in needed if importlib.util.find_spec(name) is None]
if absent:
    print(f"{' and '.join(absent)} missing: pip install -e '.[test]' (after the CUDA torch)")
    sys.exit(1)
EOF
) || {
    echo "error: ${missing:-$PYTHON cannot run}" >&2
    exit 2
}

mkdir -p "$OUT"
{
    nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_cap --format=csv ||
        echo "nvidia-smi: not available"
    "$PYTHON" -c '
import platform, torch
nccl = ".".join(map(str, torch.cuda.nccl.version()))
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
      f"NCCL {nccl}, Python {platform.python_version()}")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"cuda:{i} {p.name}, {p.total_memory / 2**30:.1f} GiB, capability {p.major}.{p.minor}")
' || echo "torch: the versions could not be read"
    date -u "+measured %Y-%m-%d %H:%M UTC on $(hostname)"
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

echo "== 1/2 the GPU tests: python -m pytest tests/test_gpu.py -m gpu -rs" \
    "(stopped after ${TESTS_LIMIT_S} s)" >&2
tests=0
timeout --signal=INT --kill-after=60 "$TESTS_LIMIT_S" \
    "$PYTHON" -m pytest tests/test_gpu.py -m gpu -rs --junitxml "$OUT/pytest.xml" 2>&1 |
    tee "$OUT/pytest.txt" || tests=$?

echo "== 2/2 ResNet-50 on the GPU: benchmarks/run.py --only gpu --pairs $PAIRS" \
    "(stopped after ${BENCH_LIMIT_S} s)" >&2
bench=0
timeout --signal=INT --kill-after=60 "$BENCH_LIMIT_S" \
    "$PYTHON" benchmarks/run.py --only gpu --pairs "$PAIRS" --out "$OUT/results.json" |
    tee "$OUT/table.md" || bench=$?

echo "figures: $OUT/ (machine.txt, pytest.txt, pytest.xml, results.json, table.md)"
if [ "$tests" -ne 0 ] || [ "$bench" -ne 0 ]; then
    echo "error: the GPU tests exited $tests and the benchmark $bench (124: out of time)" >&2
    exit 1
fi

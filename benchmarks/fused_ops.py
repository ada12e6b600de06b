"""The npu stand-in's fused operators (devicekit/simulate/fused/) against the plain-torch blocks
they replace: what a call costs on the host, so no one mistakes the stand-in's speed for an NPU's.

    python benchmarks/fused_ops.py                 # about a minute on 2 idle cores
    python benchmarks/fused_ops.py --pairs 8 --out /tmp/fused.json

One process, CPU tensors (the references run on any device; what the stand-in's dispatch adds
per operator is benchmarks/standin.py's row 3c), pinned to the first two cores this process
may use, two threads. Each row is one training call, forward and backward with a fixed output
gradient, of a torch_npu operator's reference and of the block a model writes without it,
on the same inputs: npu_rms_norm and LLaMA's RMSNorm, npu_fusion_attention (BSND, causal,
sparse_mode 2) and torch's scaled_dot_product_attention, npu_rotary_mul and rotate_half,
npu_swiglu and silu(gate) * up, npu_scaled_masked_softmax and a masked softmax. After
warm-up, blocks of --block-steps calls alternate, the order reversed every other pair
(benchmarks/stats.py); a block's figure is its median call, a pair's ratio reference / plain.
The row is the median ratio with its sign-test interval. Reported, never asserted in a test.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from machine import cpu_and_versions  # noqa: E402
from stats import alternate_blocks, median_interval, step_timer  # noqa: E402

from devicekit.simulate.fused.activations import (  # noqa: E402
    npu_scaled_masked_softmax,
    npu_swiglu,
)
from devicekit.simulate.fused.attention import npu_fusion_attention  # noqa: E402
from devicekit.simulate.fused.norms import npu_rms_norm  # noqa: E402
from devicekit.simulate.fused.rotary import npu_rotary_mul  # noqa: E402

EPS = 1e-6


def leaf(*shape, dtype):
    return torch.randn(*shape).to(dtype).requires_grad_()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def llama_rms_norm(x, weight):
    wide = x.float()
    return weight * (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)


def rows(dtype):
    """{name: (what, inputs, reference, plain)}: each callable takes the inputs and returns
    the tensor a training step differentiates."""
    b, s, n, d = 2, 512, 8, 64
    hidden = n * d
    x, weight = leaf(4, s, hidden, dtype=dtype), leaf(hidden, dtype=dtype)
    q, k, v = (leaf(b, s, n, d, dtype=dtype) for _ in range(3))
    causal = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    positions = torch.outer(torch.arange(s).float(), 1e-4 ** (torch.arange(0, d, 2) / d))
    angles = torch.cat([positions] * 2, dim=-1)[None, :, None]
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    gate_up = leaf(4, s, 2 * 1376, dtype=dtype)
    scores = leaf(b, n, 256, 256, dtype=dtype)
    padding = torch.zeros(b, 1, 256, 256, dtype=torch.bool)
    padding[..., 200:] = True
    scale = 1 / math.sqrt(d)
    return {
        "rms_norm": (
            f"npu_rms_norm / LLaMA RMSNorm, [4, {s}, {hidden}]",
            (x, weight),
            lambda x, w: npu_rms_norm(x, w, EPS)[0],
            llama_rms_norm,
        ),
        "fusion_attention": (
            f"npu_fusion_attention (BSND, sparse_mode 2) / scaled_dot_product_attention "
            f"(is_causal), [{b}, {s}, {n}, {d}]",
            (q, k, v),
            lambda q, k, v: npu_fusion_attention(
                q, k, v, n, "BSND", atten_mask=causal, scale=scale, sparse_mode=2
            )[0],
            lambda q, k, v: F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            ).transpose(1, 2),
        ),
        "rotary_mul": (
            f"npu_rotary_mul (half) / x * cos + rotate_half(x) * sin, [{b}, {s}, {n}, {d}]",
            (q,),
            lambda q: npu_rotary_mul(q, cos, sin),
            lambda q: q * cos + rotate_half(q) * sin,
        ),
        "swiglu": (
            f"npu_swiglu / silu(gate) * up, [4, {s}, {2 * 1376}]",
            (gate_up,),
            npu_swiglu,
            lambda t: F.silu(t.chunk(2, -1)[0]) * t.chunk(2, -1)[1],
        ),
        "scaled_masked_softmax": (
            f"npu_scaled_masked_softmax / softmax(masked_fill(x * scale)), [{b}, {n}, 256, 256]",
            (scores,),
            lambda t: npu_scaled_masked_softmax(t, padding, scale),
            lambda t: torch.softmax((t * scale).masked_fill(padding, -10000.0), -1),
        ),
    }


def training_call(function, inputs):
    """A step for step_timer: forward, then backward with a fixed output gradient."""
    gradient = {}

    def step():
        out = function(*inputs)
        if "out" not in gradient:
            gradient["out"] = torch.randn_like(out)
        out.backward(gradient["out"])
        for tensor in inputs:
            tensor.grad = None

    return step


def measure(what, inputs, reference, plain, pairs, block_steps):
    top, bottom, ratios = alternate_blocks(
        step_timer(training_call(reference, inputs), [()]),
        step_timer(training_call(plain, inputs), [()]),
        pairs,
        block_steps,
        warmup=3,
    )
    low, high, confidence = median_interval(ratios)
    return {
        "what": what,
        "reference_ms": 1e3 * statistics.median(top),
        "plain_ms": 1e3 * statistics.median(bottom),
        "ratio": statistics.median(ratios),
        "interval": [low, high],
        "confidence": confidence,
        "pairs": pairs,
        "ratios": ratios,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--block-steps", type=int, default=4)
    parser.add_argument("--out", default=str(Path(__file__).with_name("fused_ops_results.json")))
    args = parser.parse_args()
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
    torch.set_num_threads(2)
    torch.manual_seed(0)
    results = {
        "machine": cpu_and_versions()
        | {
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_average_at_start": os.getloadavg()[0],
        },
        "note": "forward + backward per call, CPU tensors; ratio = reference / plain torch",
        "rows": {},
    }
    for dtype in (torch.float32, torch.bfloat16):
        for name, (what, inputs, reference, plain) in rows(dtype).items():
            key = f"{name} {str(dtype).removeprefix('torch.')}"
            print(f"{key} ...", file=sys.stderr, flush=True)
            row = measure(what, inputs, reference, plain, args.pairs, args.block_steps)
            results["rows"][key] = row | {"load_average_after": os.getloadavg()[0]}
            Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    machine = results["machine"]
    print(
        f"{machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}; "
        f"load average at start {machine['load_average_at_start']:.2f}\n"
    )
    print("| row | plain torch | reference | reference / plain | interval |")
    print("|---|---|---|---|---|")
    for key, row in results["rows"].items():
        print(
            f"| {key}: {row['what']} | {row['plain_ms']:.2f} ms | {row['reference_ms']:.2f} ms "
            f"| {row['ratio']:.2f} | {row['interval'][0]:.2f}-{row['interval'][1]:.2f} "
            f"({row['pairs']} pairs, {row['confidence']:.1%}) |"
        )
    print(f"\nJSON: {args.out}")


if __name__ == "__main__":
    main()

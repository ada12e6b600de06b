"""Does bf16 autocast pay on this CPU? The figure behind the CPU's AMP default.

    python benchmarks/cpu_bf16.py                 # about 4 minutes on 2 idle cores
    python benchmarks/cpu_bf16.py --pairs 8 --out /tmp/bf16.json

One process, one ResNet-18 training step (10 classes, batch 32, 96 px, forward + backward
+ SGD step), two copies with the same initial weights on the same batches: fp32 NCHW, and
torch.autocast("cpu", bfloat16) with channels_last (what main.py runs when the CPU's AMP
default is on). After warm-up, blocks of --block-steps steps alternate, the order reversed
every other pair (benchmarks/stats.py); a pair's ratio is bf16 / fp32 seconds per step.
The row is the median ratio with its sign-test interval.

The verdict checks devicekit's choice: the default (devicekit.kinds.cpu's
computes_bf16_natively(): avx512_bf16 or AMX on x86) is "right" when it is on and the whole
interval is below 1, or off and the whole interval is above 1; "wrong" when the interval
says the other; "inconclusive" when it straddles 1. Reported, never asserted in a test.
"""

import argparse
import copy
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from machine import cpu_and_versions  # noqa: E402
from stats import alternate_blocks, median_interval, step_timer  # noqa: E402

from devicekit.kinds.cpu import computes_bf16_natively  # noqa: E402
from models import create  # noqa: E402


def training_step(model, bf16):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    memory_format = torch.channels_last if bf16 else torch.contiguous_format

    def step(images, labels):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.cross_entropy(
                model(images.contiguous(memory_format=memory_format)), labels
            )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=12)
    parser.add_argument("--block-steps", type=int, default=4)
    parser.add_argument("--out", default=str(Path(__file__).with_name("cpu_bf16_results.json")))
    args = parser.parse_args()

    torch.manual_seed(0)
    fp32 = create("resnet18", num_classes=10)
    bf16 = copy.deepcopy(fp32).to(memory_format=torch.channels_last)
    batches = [(torch.randn(32, 3, 96, 96), torch.randint(0, 10, (32,))) for _ in range(4)]
    top, bottom, ratios = alternate_blocks(
        step_timer(training_step(bf16, True), batches),
        step_timer(training_step(fp32, False), batches),
        args.pairs,
        args.block_steps,
        warmup=3,
    )
    low, high, confidence = median_interval(ratios)
    default_on = computes_bf16_natively()
    if low < 1 < high:
        verdict = "inconclusive"
    else:
        verdict = "right" if default_on == (high < 1) else "wrong"
    result = {
        "machine": cpu_and_versions(),
        "default_amp_on": default_on,
        "fp32_s_per_step": statistics.median(bottom),
        "bf16_channels_last_s_per_step": statistics.median(top),
        "ratio_bf16_over_fp32": statistics.median(ratios),
        "interval": [low, high],
        "confidence": confidence,
        "pairs": args.pairs,
        "verdict": verdict,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    machine = result["machine"]
    print(f"{machine['cpu']} ({machine['cpu_family_model']}), flags {machine['flags']}")
    print(
        f"fp32 NCHW {result['fp32_s_per_step'] * 1000:.0f} ms/step, bf16 + channels_last "
        f"{result['bf16_channels_last_s_per_step'] * 1000:.0f} ms/step: ratio "
        f"{result['ratio_bf16_over_fp32']:.2f} [{low:.2f}, {high:.2f}] ({confidence:.0%}); "
        f"devicekit's default: {'bf16' if default_on else 'fp32'}: {verdict}"
    )


if __name__ == "__main__":
    main()

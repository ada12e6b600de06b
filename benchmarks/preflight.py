"""What `devicekit preflight`'s recording costs per training step.

    python benchmarks/preflight.py                # about 30 s on 2 idle cores
    python benchmarks/preflight.py --pairs 15 --block-steps 5 --out /tmp/p.json

In this one process, on the first two cores it may use (pinned as run.py and standin.py pin
theirs, two compute threads), for each model a training step (forward + backward +
optimizer step) runs plain and under the recorder, `with Recorder(Recording(), None):` as
the preflight runner enters it, a fresh Recording for every recorded block:

- resnet18: models.create("resnet18", num_classes=1000), batch 16, 64 px, fp32 NCHW,
  cross-entropy, SGD (momentum 0.9, weight decay 1e-4; the for-loop update torch picks on
  the CPU).
- gpt: a token embedding and a learned position embedding, 4 nn.TransformerEncoderLayer
  (d 128, 4 heads, feed-forward 512, dropout 0.1, batch_first, norm_first, causal mask) in
  train mode, a final LayerNorm and a 1000-token head; batch 8, sequence 64, next-token
  cross-entropy, AdamW (torch's CPU default, the for-loop update).

After --warmup steps of each, blocks of --block-steps steps alternate plain and recorded,
the order reversed every other pair; a block's figure is the median of its step times (the
Recorder's enter and exit fall outside them), a pair's ratio recorded / plain. A row is the
median ratio with its sign-test interval (benchmarks/stats.py) over --pairs pairs. Run it
on idle cores: another process on them with its own compute threads made steps 10x slower
here (2 x 2 threads on 2 cores), and the ratios meaningless.
Reported only, against the issue's words: "the recording slows a step by a small factor
(measured: 1.5-4x on small models)". One table printed and a JSON file written.

Never a timed assertion in a test: these figures are measured here and reported.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
from machine import cpu_and_versions
from process import ROOT, cores
from stats import alternate_blocks, median_interval, step_timer
from torch import nn

ISSUE_WORDS = "the recording slows a step by a small factor (measured: 1.5-4x on small models)"


def resnet18():
    """(model, optimizer, loss of a batch, batches) for ResNet-18 at 64 px, batch 16."""
    import models

    model = models.create("resnet18", num_classes=1000)
    optimizer = torch.optim.SGD(model.parameters(), 0.01, momentum=0.9, weight_decay=1e-4)
    criterion = nn.CrossEntropyLoss()
    batches = [(torch.randn(16, 3, 64, 64), torch.randint(0, 1000, (16,))) for _ in range(4)]
    return model, optimizer, lambda images, labels: criterion(model(images), labels), batches


class GPT(nn.Module):
    def __init__(self, vocab=1000, d=128, heads=4, layers=4, seq=64):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(
                d, heads, 4 * d, dropout=0.1, batch_first=True, norm_first=True
            )
            for _ in range(layers)
        )
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))

    def forward(self, tokens):
        x = self.tokens(tokens) + self.positions(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x, src_mask=self.mask, is_causal=True)
        return self.head(self.norm(x))


def gpt():
    """(model, optimizer, loss of a batch, batches) for the GPT-style stack, batch 8 x 64."""
    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters(), 3e-4)
    criterion = nn.CrossEntropyLoss()
    batches = [
        (tokens[:, :-1], tokens[:, 1:])
        for tokens in (torch.randint(0, 1000, (8, 65)) for _ in range(4))
    ]
    return model, optimizer, lambda x, y: criterion(model(x).flatten(0, 1), y.flatten()), batches


MODELS = {
    "resnet18": ("ResNet-18, batch 16, 64 px, fp32, SGD", resnet18),
    "gpt": ("4 x TransformerEncoderLayer d128 h4, batch 8 x 64 tokens, AdamW", gpt),
}


def step_ratio(build, pairs, block_steps, warmup):
    """Recorded / plain step time from blocks alternating in this process."""
    from devicekit.preflight.recording import Recorder, Recording

    torch.manual_seed(0)
    model, optimizer, loss_of, batches = build()
    model.train()

    def step(*batch):
        loss = loss_of(*batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    steps = step_timer(step, batches)

    def recorded(count):
        recording = Recording()
        with Recorder(recording, None):
            seconds = steps(count)
        if recording.steps != count or not recording.ops:
            raise RuntimeError(f"the recorder saw {recording.steps} steps of {count}")
        return seconds

    recorded_s, plain_s, ratios = alternate_blocks(recorded, steps, pairs, block_steps, warmup)
    low, high, confidence = median_interval(ratios)
    return {
        "plain_ms": 1e3 * statistics.median(plain_s),
        "recorded_ms": 1e3 * statistics.median(recorded_s),
        "ratio": statistics.median(ratios),
        "interval": [low, high],
        "confidence": confidence,
        "pairs": pairs,
        "block_steps": block_steps,
        "plain_s": plain_s,
        "recorded_s": recorded_s,
        "ratios": ratios,
    }


def format_table(results):
    m = results["machine"]
    lines = [
        f"machine: {m['cpu']} ({m['cpu_family_model']}), {m['cores']} cores used, torch "
        f"{m['torch']} ({m['torch_cpu_capability']}), Python {m['python']}; "
        f"{m['when']}, load average at start {m['load_average_at_start']:.2f}",
        "",
        f'Issue: "{ISSUE_WORDS}". Ratio: median of the paired recorded / plain block '
        "figures; interval: its sign-test interval (confidence in brackets).",
        "",
        "| model | plain ms/step | recorded ms/step | ratio | interval | pairs |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in results["rows"].items():
        lines.append(
            f"| {name}: {row['what']} | {row['plain_ms']:.1f} | "
            f"{row['recorded_ms']:.1f} | {row['ratio']:.2f}x | {row['interval'][0]:.2f}-"
            f"{row['interval'][1]:.2f}x ({row['confidence']:.1%}) | {row['pairs']} |"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=21)
    parser.add_argument("--block-steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--only", choices=list(MODELS), action="append")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "preflight_results.json"))
    args = parser.parse_args()
    os.sched_setaffinity(0, [int(core) for core in cores(2).split(",")])
    torch.set_num_threads(2)
    sys.path.insert(0, ROOT)
    results = {
        "machine": cpu_and_versions()
        | {
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_average_at_start": os.getloadavg()[0],
        },
        "issue": ISSUE_WORDS,
        "rows": {},
    }
    for name in args.only or MODELS:
        what, build = MODELS[name]
        print(f"{name} pairs ...", file=sys.stderr, flush=True)
        results["rows"][name] = {"what": what} | step_ratio(
            build, args.pairs, args.block_steps, args.warmup
        )
    results["load_average_at_end"] = os.getloadavg()[0]
    with open(args.out, "w") as handle:
        json.dump(results, handle, indent=2)
    print(format_table(results))
    print(f"\nJSON: {args.out}")


if __name__ == "__main__":
    main()

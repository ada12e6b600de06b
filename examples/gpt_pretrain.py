"""A tiny GPT pretraining loop in the nanoGPT style, on devicekit.

Warmup + cosine learning rate, gradient accumulation (no all-reduce until the last
micro-step), gradient clipping, mixed precision where the device gains from it (fp16 with
loss scaling on GPUs, bf16 on CPUs that have it natively), and a checkpoint every
--save-every iterations that --resume continues from. Runs plainly, under torchrun, a
shell loop or a scheduler, on GPU, NPU or CPU. `--strategy shard` splits the parameters,
gradients and optimizer state across the ranks (devicekit.shard) instead of copying them
to each (DDP); its checkpoint resumes on any number of ranks when --batch-size times the
ranks stays the same.
"""

# devicekit before torch: it turns torch's backend autoload off, so that an Ascend machine
# without CANN gets devicekit's one-line message rather than a traceback from `import torch`.
import devicekit

# isort: split
import argparse
import math
import os

import torch
import torch.nn as nn

VOCAB, BLOCK = 32, 16


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        mask = torch.triu(torch.ones(x.size(1), x.size(1), dtype=torch.bool, device=x.device), 1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, dim=32, heads=2, layers=2):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, dim)
        self.pos = nn.Parameter(torch.zeros(1, BLOCK, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(layers)])
        self.head = nn.Linear(dim, VOCAB)

    def forward(self, idx, targets):
        x = self.blocks(self.tok(idx) + self.pos[:, : idx.size(1)])
        logits = self.head(x)
        return nn.functional.cross_entropy(logits.float().view(-1, VOCAB), targets.view(-1))


def corpus(length=20_000, seed=0):
    """A token stream with structure to learn: a noisy counter modulo VOCAB."""
    g = torch.Generator().manual_seed(seed)
    steps = 1 + (torch.rand(length, generator=g) < 0.1).long()
    return torch.cumsum(steps, 0) % VOCAB


def get_batch(data, it, micro, rank, world_size, batch_size, accum):
    """This rank's rows of micro-batch `micro` of iteration `it`: the global batch at every
    iteration is the same whatever the number of ranks."""
    rows = batch_size * world_size
    g = torch.Generator().manual_seed(it * accum + micro)
    starts = torch.randint(len(data) - BLOCK - 1, (rows,), generator=g)[rank::world_size]
    x = torch.stack([data[s : s + BLOCK] for s in starts])
    y = torch.stack([data[s + 1 : s + 1 + BLOCK] for s in starts])
    return x, y


def get_lr(it, args):
    if it < args.warmup:
        return args.lr * (it + 1) / args.warmup
    progress = (it - args.warmup) / max(1, args.iters - args.warmup)
    return args.min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (args.lr - args.min_lr)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--layers", type=int, default=2, help="transformer blocks")
    parser.add_argument("--dim", type=int, default=32, help="embedding width")
    parser.add_argument("--batch-size", type=int, default=8, help="per process and micro-step")
    parser.add_argument("--accum", type=int, default=2, help="gradient accumulation steps")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--min-lr", type=float, default=3e-4)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--no-amp", action="store_true")
    parser.add_argument("--strategy", choices=["ddp", "shard"], default="ddp")
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--save-every", type=int, default=20)
    parser.add_argument("--out", default="gpt_ckpt.pt")
    # torch.distributed.launch appends --local-rank=N (devicekit reads LOCAL_RANK itself).
    parser.add_argument("--local-rank", "--local_rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    devicekit.launch(train, args=(args,))


def train(local_rank, args):
    devicekit.init_distributed()
    rank, world_size = devicekit.rank(), devicekit.world_size()
    device = devicekit.device()
    torch.manual_seed(1337)
    amp = devicekit.amp_enabled() and not args.no_amp

    model = TinyGPT(dim=args.dim, layers=args.layers)
    if args.strategy == "shard":
        # autocast sets the precision, as under DDP: the shards stay fp32 (bf16 shards
        # would meet a GPU's fp16 autocast, which a CPU's layer_norm refuses to mix).
        model = devicekit.shard(model, mixed_precision=False)
    else:
        model = devicekit.wrap_ddp(model.to(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    scaler = devicekit.GradScaler(enabled=amp)
    state = {"model": model, "optimizer": optimizer, "scaler": scaler}
    start = 0
    if args.resume and os.path.exists(args.out):
        start = devicekit.load_checkpoint(args.out, into=state)["iter"]

    data = corpus()
    for it in range(start, args.iters):
        for group in optimizer.param_groups:
            group["lr"] = get_lr(it, args)
        for micro in range(args.accum):
            x, y = get_batch(data, it, micro, rank, world_size, args.batch_size, args.accum)
            x, y = x.to(device), y.to(device)
            with devicekit.no_sync(model, enabled=micro < args.accum - 1):
                with devicekit.autocast(enabled=amp):
                    loss = model(x, y) / args.accum
                scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if it % args.log_every == 0:
            total = devicekit.all_reduce_sum(loss.detach().float() * args.accum)
            if rank == 0:
                print(f"iter {it} loss {total.item() / world_size:.6f} lr {get_lr(it, args):.2e}")
        if (it + 1) % args.save_every == 0:
            devicekit.save_checkpoint(args.out, {**state, "iter": it + 1})
    print(f"rank {rank}/{world_size} done: weights {devicekit.fingerprint(model)}")
    devicekit.destroy_process_group()


if __name__ == "__main__":
    main()

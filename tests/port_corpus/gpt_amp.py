"""Pretrain a tiny character-level GPT with mixed precision (torch.cuda.amp).

    python gpt_amp.py                                        # one GPU
    torchrun --standalone --nproc-per-node=8 gpt_amp.py      # DDP, one process per GPU

Warmup + cosine learning rate, gradient accumulation, clipping, fp16 autocast with a
GradScaler. The corpus is a synthetic, repetitive text, so the loss falls within seconds.
"""
import math
import os
import time
from contextlib import nullcontext

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.distributed import init_process_group, destroy_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

# -----------------------------------------------------------------------------
batch_size = 16
block_size = 32
max_iters = int(os.environ.get("MAX_ITERS", 60))
eval_interval = 20
eval_iters = 4
grad_accum = 2
learning_rate = 3e-3
min_lr = 3e-4
warmup_iters = 10
n_layer, n_head, n_embd = 2, 4, 64
dropout = 0.0
device = "cuda" if torch.cuda.is_available() else "cpu"
# -----------------------------------------------------------------------------

ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    init_process_group(backend="nccl")
    ddp_rank = int(os.environ["RANK"])
    ddp_local_rank = int(os.environ["LOCAL_RANK"])
    ddp_world_size = int(os.environ["WORLD_SIZE"])
    device = f"cuda:{ddp_local_rank}"
    torch.cuda.set_device(ddp_local_rank)
    master_process = ddp_rank == 0
    seed_offset = ddp_rank
else:
    master_process = True
    seed_offset = 0
    ddp_world_size = 1

torch.manual_seed(1337 + seed_offset)
torch.cuda.manual_seed(1337 + seed_offset)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True

text = "".join(f"{w} " for w in ("pack my box with five dozen liquor jugs " * 400).split())
chars = sorted(set(text))
stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
split = int(0.9 * len(data))
train_data, val_data = data[:split], data[split:]


def get_batch(which):
    source = train_data if which == "train" else val_data
    ix = torch.randint(len(source) - block_size, (batch_size,))
    x = torch.stack([source[i:i + block_size] for i in ix])
    y = torch.stack([source[i + 1:i + 1 + block_size] for i in ix])
    x = x.pin_memory().to(device, non_blocking=True)
    y = y.pin_memory().to(device, non_blocking=True)
    return x, y


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(n_embd, dim=2)
        q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention()
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        self.blocks = nn.Sequential(*[Block() for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx, targets=None):
        positions = torch.arange(idx.size(1), device=idx.device)
        x = self.blocks(self.tok(idx) + self.pos(positions))
        logits = self.head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


model = GPT(len(chars))
model.to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.1)
scaler = torch.cuda.amp.GradScaler()
if ddp:
    model = DDP(model, device_ids=[ddp_local_rank])
raw_model = model.module if ddp else model


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / warmup_iters
    ratio = (it - warmup_iters) / max(1, max_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


@torch.no_grad()
def estimate_loss():
    model.eval()
    out = {}
    for which in ("train", "val"):
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(which)
            with torch.cuda.amp.autocast():
                _, loss = raw_model(X, Y)
            losses[k] = loss.item()
        out[which] = losses.mean().item()
    model.train()
    return out


torch.cuda.reset_peak_memory_stats()
t0 = time.time()
first_loss = None
for it in range(max_iters):
    for group in optimizer.param_groups:
        group["lr"] = get_lr(it)

    if it % eval_interval == 0 and master_process:
        losses = estimate_loss()
        print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")

    for micro_step in range(grad_accum):
        X, Y = get_batch("train")
        sync = model.no_sync if ddp and micro_step < grad_accum - 1 else nullcontext
        with sync():
            with torch.cuda.amp.autocast():
                _, loss = model(X, Y)
                loss = loss / grad_accum
            scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)

    torch.cuda.synchronize()
    if first_loss is None:
        first_loss = loss.item() * grad_accum

if master_process:
    elapsed = time.time() - t0
    print(f"{max_iters} iterations in {elapsed:.1f}s on {ddp_world_size} process(es); "
          f"peak memory {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
    print(f"final loss {loss.item() * grad_accum:.4f} (first {first_loss:.4f})")
torch.cuda.empty_cache()
if ddp:
    destroy_process_group()

"""Sharded training with FSDP2 the way recent LLM training scripts write it, CUDA only:
each block sharded on its own with a bf16 policy, then the root; a sharded checkpoint with
torch.distributed.checkpoint. Run with: torchrun --nproc-per-node 2 fsdp2_blocks.py
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        return x + self.ff(self.norm(x))


class Net(nn.Module):
    def __init__(self, dim=64, depth=4):
        super().__init__()
        self.layers = nn.ModuleList(Block(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 1)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--ckpt", default="fsdp2_ckpt")
    args = parser.parse_args()

    dist.init_process_group("nccl")
    rank = dist.get_rank()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    torch.manual_seed(0)

    model = Net().cuda()
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

    data = torch.Generator().manual_seed(rank)
    first = None
    for step in range(args.steps):
        x = torch.randn(32, 64, generator=data).cuda()
        y = x.sum(dim=1, keepdim=True) / 8
        loss = (model(x).float() - y).pow(2).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        first = loss.item() if first is None else first

    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=args.ckpt)
    peak = torch.cuda.max_memory_allocated() / 2**20
    if rank == 0:
        print(f"final loss {loss.item():.4f} (first {first:.4f}); peak memory {peak:.2f} MiB")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Sharded fine-tuning with FSDP1 the way the recipes built on FullyShardedDataParallel
write it, CUDA only: transformer blocks wrapped by an auto-wrap policy, module states
synced from rank 0, bf16 parameters, and the full weights gathered to rank 0 for saving.
Run with: torchrun --nproc-per-node 2 fsdp1_wrap.py
"""

import argparse
import functools
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import (
    FullOptimStateDictConfig,
    FullStateDictConfig,
    MixedPrecision,
    StateDictType,
)
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy


class DecoderLayer(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 2 * width), nn.SiLU(), nn.Linear(2 * width, width)
        )

    def forward(self, hidden):
        return hidden + self.mlp(self.norm(hidden))


class Regressor(nn.Module):
    def __init__(self, width=48, layers=3):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(width) for _ in range(layers))
        self.out = nn.Linear(width, 1)

    def forward(self, hidden):
        for layer in self.layers:
            hidden = layer(hidden)
        return self.out(hidden)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--save", default="fsdp1_full.pt")
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank = dist.get_rank()

    torch.manual_seed(1234)
    model = Regressor()
    wrap_policy = functools.partial(
        transformer_auto_wrap_policy, transformer_layer_cls={DecoderLayer}
    )
    bf16 = MixedPrecision(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.float32
    )
    model = FSDP(
        model,
        auto_wrap_policy=wrap_policy,
        mixed_precision=bf16,
        device_id=torch.cuda.current_device(),
        sync_module_states=True,
        limit_all_gathers=True,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)

    data = torch.Generator().manual_seed(rank)
    first = None
    for step in range(args.steps):
        x = torch.randn(16, 48, generator=data).to(local_rank)
        target = x.mean(dim=1, keepdim=True)
        loss = (model(x).float() - target).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        model.clip_grad_norm_(1.0)
        optimizer.step()
        first = loss.item() if first is None else first

    with FSDP.state_dict_type(
        model,
        StateDictType.FULL_STATE_DICT,
        FullStateDictConfig(offload_to_cpu=True, rank0_only=True),
        FullOptimStateDictConfig(offload_to_cpu=True, rank0_only=True),
    ):
        weights = model.state_dict()
        optimizer_state = FSDP.optim_state_dict(model, optimizer)
    if rank == 0:
        torch.save({"model": weights, "optimizer": optimizer_state}, args.save)
        print(f"final loss {loss.item():.4f} (first {first:.4f}); {len(weights)} tensors saved")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

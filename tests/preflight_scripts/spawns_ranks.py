"""Starts its own ranks (mp.spawn) and joins a group of two: preflight makes it a world of one."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def worker(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "1")  # nobody listens: a real rendezvous would fail
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        loss = model(torch.randn(3, 4)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"rank {dist.get_rank()} of {dist.get_world_size()} done")
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)

"""Two training phases with a checkpoint in between, one process per GPU via mp.spawn.

Phase one trains, rank 0 writes the DDP state_dict, every rank reloads it (mapping the
tensors rank 0 saved on GPU 0 onto its own GPU) and phase two continues from there.

    python spawn_checkpoint.py /tmp/two_phase.pt
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def join_group(rank, world_size):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29533"
    dist.init_process_group("nccl", rank=rank, world_size=world_size)


class TwoLayer(nn.Module):
    def __init__(self, width=24):
        super().__init__()
        self.hidden = nn.Linear(12, width)
        self.out = nn.Linear(width, 3)

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(x)))


def phase(model, rank, steps, seed):
    """`steps` SGD steps on this rank's synthetic targets; the last loss."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(seed + rank)
    for _ in range(steps):
        inputs = torch.randn(32, 12, generator=generator).cuda(rank)
        targets = inputs[:, :3].sin().to(rank)
        loss = nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def run(rank, world_size, path):
    join_group(rank, world_size)
    torch.manual_seed(3)
    model = DDP(TwoLayer().to(rank), device_ids=[rank])
    before = phase(model, rank, 20, seed=0)

    if rank == 0:
        torch.save(model.state_dict(), path)
    dist.barrier()  # nobody reads the file before rank 0 has written it
    saved_on_gpu0 = {"cuda:%d" % 0: "cuda:%d" % rank}
    model.load_state_dict(torch.load(path, map_location=saved_on_gpu0, weights_only=True))
    after = phase(model, rank, 20, seed=1)
    print(f"rank {rank}: loss {before:.4f} -> {after:.4f}")

    dist.barrier()
    if rank == 0:
        os.remove(path)
    dist.destroy_process_group()


if __name__ == "__main__":
    gpus = torch.cuda.device_count()
    if gpus < 2:
        sys.exit(f"this example needs 2 GPUs or more, found {gpus}")
    world_size = gpus
    mp.spawn(run, args=(world_size, sys.argv[1]), nprocs=world_size, join=True)

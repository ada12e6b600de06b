"""A regression model trained with `python -m torch.distributed.launch --nproc_per_node N`.

The CUDA-only original of examples/launch_local_rank.py: the launcher appends
`--local_rank=N` (PyTorch 1.x spelling), the script binds that GPU and joins with nccl.
"""

import argparse
import hashlib

import torch
import torch.distributed as dist
import torch.nn as nn


def weights_digest(model):
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def batches(step, rank, world_size, batch_size, seed=0):
    """This rank's share of global batch `step`: the same global batch at every world size."""
    g = torch.Generator().manual_seed(seed * 100_003 + step)
    x = torch.randn(batch_size * world_size, 8, generator=g)
    y = x @ torch.linspace(-1, 1, 8).unsqueeze(1) + 0.1 * torch.randn(len(x), 1, generator=g)
    return x[rank::world_size], y[rank::world_size]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--out", default="launch_local_rank.pt")
    args = parser.parse_args()

    torch.cuda.set_device(args.local_rank)
    dist.init_process_group(backend="nccl")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", args.local_rank)

    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)
    model = nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank],
                                                output_device=args.local_rank)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(args.steps):
        x, y = batches(step, rank, world_size, args.batch_size)
        x, y = x.cuda(), y.cuda()
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    torch.cuda.synchronize()
    if rank == 0:
        torch.save({"model": model.module.state_dict(), "steps": args.steps}, args.out)
    print(f"rank {rank}/{world_size} done: weights {weights_digest(model.module)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

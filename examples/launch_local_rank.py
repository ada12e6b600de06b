"""A regression model in the `torch.distributed.launch` style, on devicekit.

Scripts written for `python -m torch.distributed.launch --nproc_per_node N` parse the
`--local_rank` the launcher appends; PyTorch 2.x appends `--local-rank` instead, so both
spellings are accepted. devicekit.launch() also runs it plainly or under torchrun.
"""

# devicekit before torch: it turns torch's backend autoload off, so that an Ascend machine
# without CANN gets devicekit's one-line message rather than a traceback from `import torch`.
import devicekit

# isort: split
import argparse

import torch
import torch.nn as nn


def batches(step, rank, world_size, batch_size, seed=0):
    """This rank's share of global batch `step`: the same global batch at every world size."""
    g = torch.Generator().manual_seed(seed * 100_003 + step)
    x = torch.randn(batch_size * world_size, 8, generator=g)
    y = x @ torch.linspace(-1, 1, 8).unsqueeze(1) + 0.1 * torch.randn(len(x), 1, generator=g)
    return x[rank::world_size], y[rank::world_size]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", "--local-rank", type=int, default=-1)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--out", default="launch_local_rank.pt")
    args = parser.parse_args()
    devicekit.launch(train, args=(args,))


def train(local_rank, args):
    devicekit.init_distributed()
    rank, world_size = devicekit.rank(), devicekit.world_size()
    device = devicekit.device()

    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)
    model = devicekit.wrap_ddp(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(args.steps):
        x, y = batches(step, rank, world_size, args.batch_size)
        x, y = x.to(device), y.to(device)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    devicekit.synchronize()
    devicekit.save_checkpoint(args.out, {"model": model, "steps": args.steps})
    print(f"rank {rank}/{world_size} done: weights {devicekit.fingerprint(model)}")
    devicekit.destroy_process_group()


if __name__ == "__main__":
    main()

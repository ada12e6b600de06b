"""A small classifier trained on every device of this node, the mp.spawn way, on devicekit.

The style of the PyTorch DDP tutorials: a Config class, a `train(gpu, cfg)` function that
mp.spawn would start once per GPU. Here devicekit.launch() starts it: once per device
when run plainly (`python examples/spawn_config.py`; 2 ranks on a CPU), or once in this
process when torchrun, a shell loop or a scheduler started it.
"""

# devicekit before torch: it turns torch's backend autoload off, so that an Ascend machine
# without CANN gets devicekit's one-line message rather than a traceback from `import torch`.
import devicekit

# isort: split
import argparse

import torch
import torch.nn as nn


class Config:
    epochs = 2
    batch_size = 16  # per process
    lr = 0.05
    out = "spawn_config.pt"


def make_data(n=512, seed=0):
    """A fixed, learnable data set: 20 features, 4 classes from a random linear map."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 20, generator=g)
    y = (x @ torch.randn(20, 4, generator=g)).argmax(1)
    return torch.utils.data.TensorDataset(x, y)


def train(gpu, cfg):
    devicekit.init_distributed()
    rank = devicekit.rank()
    torch.manual_seed(0)
    device = devicekit.device()
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    model = devicekit.wrap_ddp(model)
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), cfg.lr)

    dataset = make_data()
    sampler = torch.utils.data.distributed.DistributedSampler(dataset)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=cfg.batch_size,
        shuffle=False,
        num_workers=0,
        pin_memory=devicekit.pin_memory(),
        sampler=sampler,
    )
    for epoch in range(cfg.epochs):
        sampler.set_epoch(epoch)
        for images, labels in loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            loss = criterion(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if rank == 0:
            print(f"epoch {epoch} loss {loss.item():.4f}")
    devicekit.save_checkpoint(cfg.out, {"model": model})
    print(f"rank {rank}/{devicekit.world_size()} done: weights {devicekit.fingerprint(model)}")
    devicekit.destroy_process_group()


def main():
    cfg = Config()
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=cfg.epochs)
    parser.add_argument("--batch-size", type=int, default=cfg.batch_size)
    parser.add_argument("--out", default=cfg.out)
    # torch.distributed.launch appends --local-rank=N (devicekit reads LOCAL_RANK itself).
    parser.add_argument("--local-rank", "--local_rank", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    cfg.epochs, cfg.batch_size, cfg.out = args.epochs, args.batch_size, args.out
    devicekit.launch(train, args=(cfg,))


if __name__ == "__main__":
    main()

"""Fit a small regression MLP with DistributedDataParallel, one process per GPU.

Start it with torchrun, which sets RANK, LOCAL_RANK and WORLD_SIZE for every process:

    torchrun --standalone --nproc-per-node=4 ddp_trainer.py --epochs 10 --save-every 2

A snapshot (weights and the epoch reached) is written every --save-every epochs; a run that
finds one resumes from it.
"""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class NoisyLinear(Dataset):
    """y = x @ w + noise, fixed by a seed so every rank sees the same data set."""

    def __init__(self, samples: int, features: int = 16):
        generator = torch.Generator().manual_seed(1234)
        self.x = torch.randn(samples, features, generator=generator)
        weights = torch.randn(features, 1, generator=generator)
        self.y = self.x @ weights + 0.01 * torch.randn(samples, 1, generator=generator)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, index):
        return self.x[index], self.y[index]


def ddp_setup():
    init_process_group(backend="nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))


class Trainer:
    def __init__(self, model, loader, optimizer, save_every, snapshot_path):
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.model = model.to(self.gpu_id)
        self.loader = loader
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.epochs_run = 0
        if os.path.exists(snapshot_path):
            self._load_snapshot()
        self.model = DDP(self.model, device_ids=[self.gpu_id])

    def _load_snapshot(self):
        location = f"cuda:{self.gpu_id}"
        snapshot = torch.load(self.snapshot_path, map_location=location)
        self.model.load_state_dict(snapshot["model"])
        self.epochs_run = snapshot["epochs_run"]
        print(f"[rank {self.global_rank}] resumed from the snapshot at epoch {self.epochs_run}")

    def _save_snapshot(self, epoch):
        snapshot = {"model": self.model.module.state_dict(), "epochs_run": epoch + 1}
        torch.save(snapshot, self.snapshot_path)
        print(f"epoch {epoch}: snapshot saved to {self.snapshot_path}")

    def _step(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _epoch(self, epoch):
        self.loader.sampler.set_epoch(epoch)
        total = 0.0
        for source, targets in self.loader:
            source = source.to(self.gpu_id)
            targets = targets.to(self.gpu_id)
            total += self._step(source, targets)
        return total / len(self.loader)

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            loss = self._epoch(epoch)
            print(f"[rank {self.global_rank}] epoch {epoch} | steps {len(self.loader)} | "
                  f"loss {loss:.5f}")
            if self.gpu_id == 0 and (epoch + 1) % self.save_every == 0:
                self._save_snapshot(epoch)


def main():
    parser = argparse.ArgumentParser(description="DDP regression under torchrun")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--save-every", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--snapshot", default="snapshot.pt")
    args = parser.parse_args()

    ddp_setup()
    dataset = NoisyLinear(512)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=False, pin_memory=True,
                        sampler=DistributedSampler(dataset))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    Trainer(model, loader, optimizer, args.save_every, args.snapshot).train(args.epochs)
    destroy_process_group()


if __name__ == "__main__":
    main()

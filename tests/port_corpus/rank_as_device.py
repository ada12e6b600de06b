"""A small DDP example in the style of book and course appendices: mp.spawn gives each
process its GPU number, and that integer is the device everywhere, including through
helper functions (`compute_accuracy(model, loader, device=rank)` then `x.to(device)`).
CUDA-only as written.

    python rank_as_device.py --epochs 3
"""

import argparse
import os

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class ToyDataset(Dataset):
    def __init__(self, size, seed):
        generator = torch.Generator().manual_seed(seed)
        self.features = torch.randn(size, 2, generator=generator)
        self.labels = (self.features[:, 0] * self.features[:, 1] > 0).long()

    def __getitem__(self, index):
        return self.features[index], self.labels[index]

    def __len__(self):
        return self.labels.shape[0]


class NeuralNetwork(torch.nn.Module):
    def __init__(self, num_inputs, num_outputs):
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(num_inputs, 32), torch.nn.ReLU(),
            torch.nn.Linear(32, 16), torch.nn.ReLU(),
            torch.nn.Linear(16, num_outputs),
        )

    def forward(self, x):
        return self.layers(x)


def ddp_setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12345"
    init_process_group(backend="nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)


def prepare_dataset():
    train_loader = DataLoader(ToyDataset(512, seed=1), batch_size=16, shuffle=False,
                              pin_memory=True, drop_last=True,
                              sampler=DistributedSampler(ToyDataset(512, seed=1)))
    test_loader = DataLoader(ToyDataset(128, seed=2), batch_size=16, shuffle=False)
    return train_loader, test_loader


def calc_loss_batch(features, labels, model, device):
    features, labels = features.to(device), labels.to(device)
    return F.cross_entropy(model(features), labels)


def compute_accuracy(model, dataloader, device):
    model = model.eval()
    correct, total = 0.0, 0
    for features, labels in dataloader:
        features, labels = features.to(device), labels.to(device)
        with torch.no_grad():
            logits = model(features)
        correct += torch.sum(torch.argmax(logits, dim=1) == labels).item()
        total += len(labels)
    return correct / total


def main(rank, world_size, num_epochs):
    ddp_setup(rank, world_size)
    torch.manual_seed(123)
    train_loader, test_loader = prepare_dataset()
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    model.to(rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model = DDP(model, device_ids=[rank])

    for epoch in range(num_epochs):
        train_loader.sampler.set_epoch(epoch)
        model.train()
        for features, labels in train_loader:
            loss = calc_loss_batch(features, labels, model, rank)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"[GPU{rank}] Epoch: {epoch + 1:03d}/{num_epochs:03d} | Loss: {loss:.2f}")

    train_acc = compute_accuracy(model, train_loader, device=rank)
    test_acc = compute_accuracy(model, test_loader, device=rank)
    print(f"[GPU{rank}] Training accuracy {train_acc:.2f}, test accuracy {test_acc:.2f}")
    destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    print("Number of GPUs available:", torch.cuda.device_count())
    torch.manual_seed(123)
    world_size = torch.cuda.device_count()
    mp.spawn(main, args=(world_size, args.epochs), nprocs=world_size)

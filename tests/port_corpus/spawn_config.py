"""A small classifier trained on every GPU of this node, the mp.spawn way.

The CUDA-only original of examples/spawn_config.py: a Config class holds the node layout
(gpus, nr, nodes), the parent sets MASTER_ADDR/MASTER_PORT and mp.spawn starts one
process per GPU.
"""

import argparse
import hashlib
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Config:
    gpus = torch.cuda.device_count()  # processes on this node
    nr = 0  # this node's rank
    nodes = 1
    epochs = 2
    batch_size = 16  # per process
    lr = 0.05
    out = "spawn_config.pt"

    @property
    def world_size(self):
        return self.gpus * self.nodes


def make_data(n=512, seed=0):
    """A fixed, learnable data set: 20 features, 4 classes from a random linear map."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 20, generator=g)
    y = (x @ torch.randn(20, 4, generator=g)).argmax(1)
    return torch.utils.data.TensorDataset(x, y)


def weights_digest(model):
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def train(gpu, cfg):
    rank = cfg.nr * cfg.gpus + gpu
    dist.init_process_group(backend="nccl", init_method="env://",
                            world_size=cfg.world_size, rank=rank)
    torch.manual_seed(0)
    torch.cuda.set_device(gpu)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4)).cuda(gpu)
    model = DDP(model, device_ids=[gpu])
    criterion = nn.CrossEntropyLoss().cuda(gpu)
    optimizer = torch.optim.SGD(model.parameters(), cfg.lr)

    dataset = make_data()
    sampler = torch.utils.data.distributed.DistributedSampler(
        dataset, num_replicas=cfg.world_size, rank=rank)
    loader = torch.utils.data.DataLoader(dataset, batch_size=cfg.batch_size, shuffle=False,
                                         num_workers=0, pin_memory=True, sampler=sampler)
    for epoch in range(cfg.epochs):
        sampler.set_epoch(epoch)
        for images, labels in loader:
            images = images.cuda(non_blocking=True)
            labels = labels.cuda(non_blocking=True)
            loss = criterion(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if rank == 0:
            print(f"epoch {epoch} loss {loss.item():.4f}")
    if rank == 0:
        torch.save({"model": model.module.state_dict()}, cfg.out)
    print(f"rank {rank}/{cfg.world_size} done: weights {weights_digest(model.module)}")
    dist.destroy_process_group()


def main():
    cfg = Config()
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=cfg.epochs)
    parser.add_argument("--batch-size", type=int, default=cfg.batch_size)
    parser.add_argument("--out", default=cfg.out)
    args = parser.parse_args()
    cfg.epochs, cfg.batch_size, cfg.out = args.epochs, args.batch_size, args.out
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "8888"
    mp.spawn(train, nprocs=cfg.gpus, args=(cfg,))


if __name__ == "__main__":
    main()

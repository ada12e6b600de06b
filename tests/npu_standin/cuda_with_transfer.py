"""A CUDA training script in the style of PyTorch's ImageNet example, unchanged but for the
two lines an Ascend user adds above it (`import torch_npu` and transfer_to_npu): nccl,
torch.cuda.set_device, .cuda(), DDP with device_ids, torch.cuda.amp, a DistributedSampler,
a checkpoint loaded with map_location="cuda:N". The data are synthetic.

One GPU:     python cuda_with_transfer.py --gpu 0
torchrun:    torchrun --nproc-per-node 2 cuda_with_transfer.py --dist-url env://

Each rank prints where its parameters are, the backend, the autocast dtype and a checksum
of its final weights.
"""

# ruff: noqa: I001  (the two lines an Ascend user adds go first)
import torch_npu  # noqa: F401
from torch_npu.contrib import transfer_to_npu  # noqa: F401

import argparse
import os
import sys

import torch
import torch.backends.cudnn as cudnn
import torch.distributed as dist
import torch.nn as nn
import torch.utils.data
import torch.utils.data.distributed

parser = argparse.ArgumentParser(description="Synthetic ImageNet-style training")
parser.add_argument("--epochs", default=1, type=int)
parser.add_argument("-b", "--batch-size", default=16, type=int)
parser.add_argument("--lr", default=0.05, type=float)
parser.add_argument("--dist-url", default="tcp://127.0.0.1:23456", type=str)
parser.add_argument("--dist-backend", default="nccl", type=str)
parser.add_argument("--world-size", default=-1, type=int)
parser.add_argument("--rank", default=-1, type=int)
parser.add_argument("--gpu", default=None, type=int, help="GPU id to use")
parser.add_argument("--checkpoint", default="checkpoint.pth.tar", type=str)


class Blobs(torch.utils.data.Dataset):
    """64 noisy 3x8x8 images whose class (of 4) is their mean colour."""

    def __init__(self):
        generator = torch.Generator().manual_seed(1)
        self.labels = torch.randint(0, 4, (64,), generator=generator)
        palette = torch.rand(4, 3, 1, 1, generator=generator)
        self.images = palette[self.labels] + 0.3 * torch.randn(64, 3, 8, 8, generator=generator)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return self.images[index], self.labels[index]


def main():
    args = parser.parse_args()
    if args.dist_url == "env://" and args.world_size == -1:
        args.world_size = int(os.environ["WORLD_SIZE"])
    args.distributed = args.world_size > 1
    if args.distributed:
        args.rank = int(os.environ["RANK"])
        args.gpu = int(os.environ["LOCAL_RANK"])
        dist.init_process_group(
            backend=args.dist_backend,
            init_method=args.dist_url,
            world_size=args.world_size,
            rank=args.rank,
        )
    main_worker(args)


def main_worker(args):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
    )  # fmt: skip
    torch.cuda.set_device(args.gpu)
    model.cuda(args.gpu)
    if args.distributed:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
    criterion = nn.CrossEntropyLoss().cuda(args.gpu)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=0.9)
    scaler = torch.cuda.amp.GradScaler()
    cudnn.benchmark = True

    dataset = Blobs()
    sampler = torch.utils.data.distributed.DistributedSampler(dataset) if args.distributed else None
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, shuffle=sampler is None, pin_memory=True,
        sampler=sampler,
    )  # fmt: skip

    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        model.train()
        for images, target in loader:
            images = images.cuda(args.gpu, non_blocking=True)
            target = target.cuda(args.gpu, non_blocking=True)
            with torch.cuda.amp.autocast():
                output = model(images)
                loss = criterion(output, target)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    torch.cuda.synchronize()

    rank = dist.get_rank() if args.distributed else 0
    if rank == 0:
        torch.save({"state_dict": model.state_dict()}, args.checkpoint)
    if args.distributed:
        dist.barrier()
    checkpoint = torch.load(args.checkpoint, map_location=f"cuda:{args.gpu}")
    restored = {str(tensor.device) for tensor in checkpoint["state_dict"].values()}

    devices = sorted({str(p.device) for p in model.parameters()})
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    backend = dist.get_backend() if args.distributed else "none"
    # One write per line: under torchrun the ranks share stdout, and print() writes the
    # line and its newline apart.
    sys.stdout.write(
        f"rank {rank}: cuda available {torch.cuda.is_available()}, parameters on {devices}, "
        f"backend {backend}, autocast {output.dtype}, checkpoint on {sorted(restored)}, "
        f"checksum {checksum!r}\n"
    )
    sys.stdout.flush()
    if args.distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""An image-classification DDP script in the style of Ascend's ModelZoo training scripts:
torch_npu imported, "npu:{}" device strings, torch.npu.set_device, hccl, one process per
NPU started by mp.spawn (8p) or by a launcher, torch.npu.amp, a compile-mode switch.
Ascend-only as written: it needs torch_npu and an NPU.

    python ascend_ddp.py --multiprocessing-distributed --world-size 1 --rank 0 --amp
    torchrun --nproc-per-node 2 ascend_ddp.py --dist-url env://
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch_npu
from torch.utils.data import DataLoader, Dataset, DistributedSampler

parser = argparse.ArgumentParser(description="PyTorch training on Ascend NPUs")
parser.add_argument("--epochs", default=3, type=int)
parser.add_argument("-b", "--batch-size", default=64, type=int, help="per node")
parser.add_argument("--lr", default=0.05, type=float)
parser.add_argument("--world-size", default=-1, type=int, help="number of nodes")
parser.add_argument("--rank", default=-1, type=int, help="node rank")
parser.add_argument("--dist-url", default="tcp://127.0.0.1:29688", type=str)
parser.add_argument("--dist-backend", default="hccl", type=str)
parser.add_argument("--addr", default="127.0.0.1", type=str, help="master address")
parser.add_argument("--device", default="npu", type=str)
parser.add_argument("--device-num", default=-1, type=int, help="NPUs per node")
parser.add_argument("--npu", default=None, type=int, help="the NPU to use alone")
parser.add_argument("--multiprocessing-distributed", action="store_true")
parser.add_argument("--amp", action="store_true", help="mixed precision")
parser.add_argument("--loss-scale", default=1024.0, type=float)
parser.add_argument("--save", default="", type=str, help="where rank 0 saves the model")


class Shapes(Dataset):
    """Two classes of 3x16x16 images: a bright square top-left or bottom-right."""

    def __init__(self, size, seed=0):
        generator = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 2, (size,), generator=generator)
        self.images = torch.rand(size, 3, 16, 16, generator=generator) * 0.3
        for i, label in enumerate(self.labels.tolist()):
            corner = slice(0, 8) if label == 0 else slice(8, 16)
            self.images[i, :, corner, corner] += 0.7

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return self.images[index], self.labels[index]


def make_model():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(128, 2))


def main():
    args = parser.parse_args()
    os.environ["MASTER_ADDR"] = args.addr
    os.environ["MASTER_PORT"] = "29688"
    torch.npu.set_compile_mode(jit_compile=False)

    if args.dist_url == "env://" and args.world_size == -1:
        args.world_size = int(os.environ["WORLD_SIZE"])
    args.distributed = args.world_size > 1 or args.multiprocessing_distributed
    if args.device_num != -1:
        npus_per_node = args.device_num
    else:
        npus_per_node = torch.npu.device_count()
    if args.multiprocessing_distributed:
        args.world_size = npus_per_node * args.world_size
        mp.spawn(main_worker, nprocs=npus_per_node, args=(npus_per_node, args))
    else:
        main_worker(args.npu, npus_per_node, args)


def main_worker(npu, npus_per_node, args):
    args.npu = npu
    if args.distributed:
        if args.dist_url == "env://" and args.rank == -1:
            args.rank = int(os.environ["RANK"])
            args.npu = int(os.environ["LOCAL_RANK"])
        if args.multiprocessing_distributed:
            args.rank = args.rank * npus_per_node + npu
    loc = "npu:{}".format(args.npu if args.npu is not None else 0)
    torch.npu.set_device(loc)
    if args.distributed:
        dist.init_process_group(backend=args.dist_backend, init_method=args.dist_url,
                                world_size=args.world_size, rank=args.rank)
        args.batch_size = int(args.batch_size / npus_per_node)
    torch.manual_seed(0)

    model = make_model().to(loc)
    criterion = nn.CrossEntropyLoss().to(loc)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=0.9)
    scaler = torch.npu.amp.GradScaler(init_scale=args.loss_scale, enabled=args.amp)
    if args.distributed:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.npu],
                                                          broadcast_buffers=False)

    dataset = Shapes(512)
    sampler = DistributedSampler(dataset) if args.distributed else None
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=sampler is None,
                        sampler=sampler, pin_memory=True, drop_last=True)
    rank = args.rank if args.distributed else 0
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        correct = seen = 0
        start = time.time()
        for images, target in loader:
            images = images.npu(non_blocking=True)
            target = target.to(loc, non_blocking=True)
            with torch.npu.amp.autocast(enabled=args.amp):
                output = model(images)
                loss = criterion(output, target)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            correct += (output.argmax(1) == target).sum().item()
            seen += target.numel()
        torch.npu.synchronize()
        print(f"[rank {rank}] epoch {epoch} loss {loss.item():.4f} accuracy "
              f"{100.0 * correct / seen:.1f} % in {time.time() - start:.2f} s on {loc}")

    if rank == 0 and args.save:
        state = model.module.state_dict() if args.distributed else model.state_dict()
        torch.save(state, args.save)
    if args.distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Image classification in the style of the classic ImageNet training script.

One GPU:                  python imagenet_style.py --gpu 0
All GPUs, one process:    python imagenet_style.py                      (nn.DataParallel)
One process per GPU:      python imagenet_style.py --multiprocessing-distributed \
                              --world-size 1 --rank 0 --dist-url tcp://127.0.0.1:23456
torchrun:                 torchrun --nproc-per-node 8 imagenet_style.py --dist-url env://

The data are synthetic 3x16x16 "images" of 10 classes (a class is a mean colour), so a
run needs no download.
"""
import argparse
import os
import random
import shutil
import time
import warnings

import torch
import torch.backends.cudnn as cudnn
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.parallel
import torch.optim
import torch.utils.data
import torch.utils.data.distributed

parser = argparse.ArgumentParser(description="Synthetic ImageNet-style training")
parser.add_argument("--epochs", default=3, type=int, metavar="N")
parser.add_argument("--start-epoch", default=0, type=int, metavar="N")
parser.add_argument("-b", "--batch-size", default=64, type=int, metavar="N",
                    help="total mini-batch size of all GPUs of a node")
parser.add_argument("--lr", "--learning-rate", default=0.05, type=float, dest="lr")
parser.add_argument("--momentum", default=0.9, type=float)
parser.add_argument("--wd", "--weight-decay", default=1e-4, type=float, dest="weight_decay")
parser.add_argument("-p", "--print-freq", default=5, type=int)
parser.add_argument("-j", "--workers", default=0, type=int)
parser.add_argument("--resume", default="", type=str, metavar="PATH")
parser.add_argument("--checkpoint", default="checkpoint.pth.tar", type=str, metavar="PATH")
parser.add_argument("--world-size", default=-1, type=int, help="number of nodes")
parser.add_argument("--rank", default=-1, type=int, help="node rank")
parser.add_argument("--dist-url", default="tcp://224.66.41.62:23456", type=str)
parser.add_argument("--dist-backend", default="nccl", type=str)
parser.add_argument("--seed", default=None, type=int)
parser.add_argument("--gpu", default=None, type=int, help="GPU id to use")
parser.add_argument("--multiprocessing-distributed", action="store_true",
                    help="one process per GPU, N GPUs per node")

best_acc1 = 0


class ColourBlobs(torch.utils.data.Dataset):
    """`size` noisy images whose class is their mean colour."""

    def __init__(self, size, seed):
        generator = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 10, (size,), generator=generator)
        palette = torch.rand(10, 3, 1, 1, generator=torch.Generator().manual_seed(7))
        self.images = palette[self.labels] + 0.3 * torch.randn(size, 3, 16, 16,
                                                               generator=generator)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return self.images[index], self.labels[index]


def small_convnet():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
        nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def main():
    args = parser.parse_args()

    if args.seed is not None:
        random.seed(args.seed)
        torch.manual_seed(args.seed)
        cudnn.deterministic = True
        warnings.warn("--seed makes cuDNN deterministic: expect slower epochs.")

    if args.gpu is not None:
        warnings.warn("--gpu given: that GPU trains alone, without data parallelism.")

    if args.dist_url == "env://" and args.world_size == -1:
        args.world_size = int(os.environ["WORLD_SIZE"])

    args.distributed = args.world_size > 1 or args.multiprocessing_distributed

    ngpus_per_node = torch.cuda.device_count()
    if args.multiprocessing_distributed:
        # world_size becomes the total number of processes
        args.world_size = ngpus_per_node * args.world_size
        mp.spawn(main_worker, nprocs=ngpus_per_node, args=(ngpus_per_node, args))
    else:
        main_worker(args.gpu, ngpus_per_node, args)


def main_worker(gpu, ngpus_per_node, args):
    global best_acc1
    args.gpu = gpu

    if args.gpu is not None:
        print("training on GPU {}".format(args.gpu))

    if args.distributed:
        if args.dist_url == "env://" and args.rank == -1:
            args.rank = int(os.environ["RANK"])
        if args.multiprocessing_distributed:
            # the global rank among all the processes
            args.rank = args.rank * ngpus_per_node + gpu
        dist.init_process_group(backend=args.dist_backend, init_method=args.dist_url,
                                world_size=args.world_size, rank=args.rank)

    model = small_convnet()
    if args.distributed:
        if args.gpu is not None:
            torch.cuda.set_device(args.gpu)
            model.cuda(args.gpu)
            # one process per GPU: split the node's batch and workers between them
            args.batch_size = int(args.batch_size / ngpus_per_node)
            args.workers = int((args.workers + ngpus_per_node - 1) / ngpus_per_node)
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
        else:
            model.cuda()
            # DistributedDataParallel over all visible GPUs
            model = torch.nn.parallel.DistributedDataParallel(model)
    elif args.gpu is not None:
        torch.cuda.set_device(args.gpu)
        model = model.cuda(args.gpu)
    else:
        model = torch.nn.DataParallel(model).cuda()

    criterion = nn.CrossEntropyLoss().cuda(args.gpu)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)

    if args.resume:
        if os.path.isfile(args.resume):
            print("resuming from {}".format(args.resume))
            if args.gpu is None:
                checkpoint = torch.load(args.resume)
            else:
                loc = "cuda:{}".format(args.gpu)
                checkpoint = torch.load(args.resume, map_location=loc)
            args.start_epoch = checkpoint["epoch"]
            best_acc1 = checkpoint["best_acc1"]
            model.load_state_dict(checkpoint["state_dict"])
            optimizer.load_state_dict(checkpoint["optimizer"])
            print("resumed {} at epoch {}".format(args.resume, checkpoint["epoch"]))
        else:
            print("no checkpoint at {}: starting afresh".format(args.resume))

    cudnn.benchmark = True

    train_dataset = ColourBlobs(512, seed=1)
    val_dataset = ColourBlobs(128, seed=2)
    if args.distributed:
        train_sampler = torch.utils.data.distributed.DistributedSampler(train_dataset)
        val_sampler = torch.utils.data.distributed.DistributedSampler(val_dataset, shuffle=False)
    else:
        train_sampler = None
        val_sampler = None

    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, shuffle=(train_sampler is None),
        num_workers=args.workers, pin_memory=True, sampler=train_sampler)
    val_loader = torch.utils.data.DataLoader(
        val_dataset, batch_size=args.batch_size, shuffle=False,
        num_workers=args.workers, pin_memory=True, sampler=val_sampler)

    for epoch in range(args.start_epoch, args.epochs):
        if args.distributed:
            train_sampler.set_epoch(epoch)

        train(train_loader, model, criterion, optimizer, epoch, args)
        acc1 = validate(val_loader, model, criterion, args)

        is_best = acc1 > best_acc1
        best_acc1 = max(acc1, best_acc1)

        if not args.multiprocessing_distributed or (args.multiprocessing_distributed
                                                    and args.rank % ngpus_per_node == 0):
            save_checkpoint({
                "epoch": epoch + 1,
                "state_dict": model.state_dict(),
                "best_acc1": best_acc1,
                "optimizer": optimizer.state_dict(),
            }, is_best, args.checkpoint)

    if args.distributed:
        dist.destroy_process_group()


def train(train_loader, model, criterion, optimizer, epoch, args):
    model.train()
    end = time.time()
    for i, (images, target) in enumerate(train_loader):
        if args.gpu is not None:
            images = images.cuda(args.gpu, non_blocking=True)
        if torch.cuda.is_available():
            target = target.cuda(args.gpu, non_blocking=True)

        output = model(images)
        loss = criterion(output, target)

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        if i % args.print_freq == 0:
            print("epoch {} step {}/{} ({:.3f} s) loss {:.4f}".format(
                epoch, i, len(train_loader), time.time() - end, loss.item()))
        end = time.time()


def validate(val_loader, model, criterion, args):
    model.eval()
    correct = torch.zeros(2).cuda(args.gpu)
    with torch.no_grad():
        for images, target in val_loader:
            images = images.cuda(args.gpu, non_blocking=True)
            target = target.cuda(args.gpu, non_blocking=True)
            output = model(images)
            correct[0] += (output.argmax(1) == target).sum()
            correct[1] += target.numel()
    if args.distributed:
        dist.all_reduce(correct)
    acc1 = 100.0 * (correct[0] / correct[1]).item()
    print("validation top-1 {:.3f} % of {} images".format(acc1, int(correct[1].item())))
    return acc1


def save_checkpoint(state, is_best, filename="checkpoint.pth.tar"):
    torch.save(state, filename)
    if is_best:
        shutil.copyfile(filename, os.path.join(os.path.dirname(filename) or ".",
                                               "model_best.pth.tar"))


if __name__ == "__main__":
    main()

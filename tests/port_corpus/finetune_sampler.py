"""Fine-tuning a pretrained backbone with a DistributedSampler, for CUDA GPUs under torchrun.

The CUDA-only original of examples/finetune_sampler.py: the backbone's weights come from
a file saved on GPU 0 (loaded with map_location="cuda:0"), its first layer stays frozen,
a new head is trained with AdamW on a DistributedSampler shard, and accuracy is summed
over all ranks with all_reduce.
"""

import argparse
import hashlib
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def backbone():
    return nn.Sequential(nn.Linear(16, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 32),
                         nn.ReLU())


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    y = (x[:, :3].sum(1) > 0).long() + (x[:, 3] > 1).long()
    return TensorDataset(x, y)


def weights_digest(model):
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pretrained", default=None, help="backbone state_dict file")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", default="finetuned.pt")
    args = parser.parse_args()

    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    rank, world_size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    features = backbone()
    if args.pretrained:
        features.load_state_dict(torch.load(args.pretrained, map_location="cuda:0"))
    for parameter in features[0].parameters():
        parameter.requires_grad = False
    model = nn.Sequential(features, nn.Linear(32, 3)).cuda()
    model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)

    train_set, val_set = make_data(1024, 0), make_data(256, 1)
    sampler = DistributedSampler(train_set, shuffle=True, seed=0)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, pin_memory=True)
    val_loader = DataLoader(val_set, batch_size=64,
                            sampler=DistributedSampler(val_set, shuffle=False))
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        correct = torch.zeros(2, device="cuda")
        with torch.no_grad():
            for x, y in val_loader:
                x, y = x.cuda(), y.cuda()
                correct += torch.stack([(model(x).argmax(1) == y).sum(), torch.tensor(len(y)).cuda()])
        dist.all_reduce(correct)
        if rank == 0:
            print(f"epoch {epoch} loss {loss.item():.4f} "
                  f"val acc {100 * correct[0].item() / correct[1].item():.1f}%")
    if rank == 0:
        torch.save(model.module.state_dict(), args.out)
    print(f"rank {rank}/{world_size} done: weights {weights_digest(model.module)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

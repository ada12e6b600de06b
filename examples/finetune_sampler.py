"""Fine-tuning a pretrained backbone with a DistributedSampler, on devicekit.

The backbone's weights come from a file (saved on any device: devicekit maps them to
this rank's), its first layer stays frozen, a new head is trained with AdamW on a
DistributedSampler shard (at world size 1 too), and accuracy is summed over all ranks.
"""

# devicekit before torch: it turns torch's backend autoload off, so that an Ascend machine
# without CANN gets devicekit's one-line message rather than a traceback from `import torch`.
import devicekit

# isort: split
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def backbone():
    return nn.Sequential(
        nn.Linear(16, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU()
    )


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    y = (x[:, :3].sum(1) > 0).long() + (x[:, 3] > 1).long()
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pretrained", default=None, help="backbone state_dict file")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", default="finetuned.pt")
    # torch.distributed.launch appends --local-rank=N (devicekit reads LOCAL_RANK itself).
    parser.add_argument("--local-rank", "--local_rank", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    devicekit.launch(train, args=(args,))


def train(local_rank, args):
    devicekit.init_distributed()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = devicekit.device()

    torch.manual_seed(0)
    features = backbone()
    if args.pretrained:
        features.load_state_dict(devicekit.load_checkpoint(args.pretrained))
    for parameter in features[0].parameters():
        parameter.requires_grad = False
    model = nn.Sequential(features, nn.Linear(32, 3)).to(device)
    model = devicekit.wrap_ddp(model)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)

    train_set, val_set = make_data(1024, 0), make_data(256, 1)
    sampler = DistributedSampler(train_set, shuffle=True, seed=0)
    loader = DataLoader(
        train_set, batch_size=args.batch_size, sampler=sampler, pin_memory=devicekit.pin_memory()
    )
    val_loader = DataLoader(
        val_set, batch_size=64, sampler=DistributedSampler(val_set, shuffle=False)
    )
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        correct = torch.zeros(2, device=device)
        with torch.no_grad():
            for x, y in val_loader:
                x, y = x.to(device), y.to(device)
                correct += torch.stack(
                    [(model(x).argmax(1) == y).sum(), torch.tensor(len(y), device=device)]
                )
        dist.all_reduce(correct)
        if rank == 0:
            print(
                f"epoch {epoch} loss {loss.item():.4f} "
                f"val acc {100 * correct[0].item() / correct[1].item():.1f}%"
            )
    devicekit.save_checkpoint(args.out, model)
    print(f"rank {rank}/{world_size} done: weights {devicekit.fingerprint(model)}")
    devicekit.destroy_process_group()


if __name__ == "__main__":
    main()

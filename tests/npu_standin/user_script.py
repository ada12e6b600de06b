"""A user's own script on devicekit's flat API, for the npu stand-in tests: DDP, fp16
autocast with a GradScaler, a checkpoint saved and loaded back with map_location.

It reports, as one JSON line per rank, where every tensor it met lived and in which dtype
autocast computed; a tensor left on the CPU would already have failed an operator.
"""

import json
import sys

import torch
from torch import nn

import devicekit


def main(out_path):
    devicekit.init_distributed()
    device = devicekit.device()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
    model = devicekit.wrap_ddp(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = devicekit.GradScaler(enabled=True, dtype="float16")
    seen = {"devices": set(), "autocast_dtypes": set()}
    generator = torch.Generator().manual_seed(devicekit.rank())
    for _ in range(3):
        x = torch.randn(8, 16, generator=generator).to(device)
        y = torch.randint(0, 4, (8,), generator=generator).to(device)
        with devicekit.autocast(enabled=True, dtype="float16"):
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
        seen["autocast_dtypes"].add(str(logits.dtype))
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        seen["devices"] |= {str(t.device) for t in (x, y, logits, loss, *model.parameters())}
        seen["devices"] |= {str(p.grad.device) for p in model.parameters()}
    devicekit.save_checkpoint(out_path, {"model": model, "optimizer": optimizer})
    devicekit.barrier()
    on_device = devicekit.load_checkpoint(out_path, map_location=device)
    on_cpu = devicekit.load_checkpoint(out_path, map_location="cpu")
    report = {
        "rank": devicekit.rank(),
        "world_size": devicekit.world_size(),
        "device": str(device),
        "backend": devicekit.backend(),
        "process_group": torch.distributed.get_backend(),
        "devices": sorted(seen["devices"]),
        "autocast_dtypes": sorted(seen["autocast_dtypes"]),
        "scaler": type(scaler).__name__,
        "scale": scaler.get_scale(),
        "loaded_on": sorted({str(t.device) for t in on_device["model"].values()}),
        "loaded_on_cpu": sorted({str(t.device) for t in on_cpu["model"].values()}),
        "same_values": all(
            torch.equal(on_device["model"][k].cpu(), on_cpu["model"][k]) for k in on_cpu["model"]
        ),
        "weights": devicekit.fingerprint(model),
    }
    print(json.dumps(report), flush=True)
    devicekit.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])

"""A user's script on the flat API, as a type checker sees it: mypy --strict accepts it."""

import torch

import devicekit


def main(local_rank: int, epochs: int) -> None:
    ctx: devicekit.LaunchContext = devicekit.init_distributed(timeout=60)
    device: torch.device = devicekit.device()
    model = devicekit.wrap_ddp(torch.nn.Linear(8, 1).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = devicekit.GradScaler()
    for _ in range(epochs):
        x = torch.randn(32, 8).to(device)
        with devicekit.autocast():
            loss = model(x).float().pow(2).mean()
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ranks: int = devicekit.world_size() * devicekit.local_world_size()
    main_process: bool = devicekit.is_main_process() and ctx.rank == devicekit.rank()
    if main_process and devicekit.is_accelerator(device) and ranks > 0:
        devicekit.synchronize()
    devicekit.save_checkpoint("ckpt.pt", {"model": model, "optimizer": optimizer})
    devicekit.barrier()
    state = devicekit.load_checkpoint("ckpt.pt", map_location="cpu")
    model.module.load_state_dict(state["model"])
    kind: str = devicekit.device_type()
    print(kind, devicekit.fingerprint(model), devicekit.amp_dtype())
    devicekit.destroy_process_group()


if __name__ == "__main__":
    devicekit.launch(main, args=(2,), nprocs=devicekit.default_ranks_per_node())

"""An Ascend-style DDP training script, written as Ascend's ModelZoo scripts are, that never
imports devicekit: `import torch_npu`, the device by its "npu:{}" string, `.npu()`,
torch.npu.amp's autocast and GradScaler, an hccl process group, a DistributedSampler, a
checkpoint saved with torch.save, and torch_npu's profiler around the steps.

It takes its rank from whatever started it:

    torchrun / torch.distributed.launch --use-env   LOCAL_RANK, RANK, WORLD_SIZE
    torch.distributed.launch                        --local-rank N (or --local_rank N)
    Ascend's shell loop (run_8p.sh)                 RANK_ID, RANK_SIZE (MASTER_ADDR/PORT)
    --multiprocessing-distributed                   mp.spawn, one rank per visible NPU
    nothing                                         one process on npu:0

The global batch (--batch-size) is split among the ranks and the sampler's shuffle is
seeded, so every 2-rank run sees the same samples at each step. Each rank writes what it
saw to OUTPUT/rank<R>.json; rank 0 saves OUTPUT/checkpoint.pth; the profiler writes its
traces to OUTPUT/prof.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch_npu
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args():
    parser = argparse.ArgumentParser(description="Ascend-style DDP training")
    parser.add_argument("--output", required=True, help="folder for checkpoint, traces, reports")
    parser.add_argument("--batch-size", type=int, default=8, help="global batch size")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--multiprocessing-distributed", action="store_true")
    # torch.distributed.launch without --use-env gives each worker --local-rank=N
    parser.add_argument("--local-rank", "--local_rank", type=int, default=None)
    return parser.parse_args()


def synthetic_dataset(seed):
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(48, 8, generator=generator)
    labels = torch.randint(0, 4, (48,), generator=generator)
    return TensorDataset(features, labels)


def main():
    args = parse_args()
    if args.multiprocessing_distributed:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29688")
        npus_per_node = torch.npu.device_count()
        mp.spawn(main_worker, nprocs=npus_per_node, args=(npus_per_node, args))
        return
    if "RANK_ID" in os.environ:  # Ascend's shell loop: one process per NPU of this node
        rank, world_size = int(os.environ["RANK_ID"]), int(os.environ["RANK_SIZE"])
        main_worker(rank, world_size, args)
    elif "WORLD_SIZE" in os.environ:  # torchrun, torch.distributed.launch
        local_rank = args.local_rank
        if local_rank is None:
            local_rank = int(os.environ["LOCAL_RANK"])
        main_worker(local_rank, int(os.environ["WORLD_SIZE"]), args)
    else:
        main_worker(0, 1, args)


def main_worker(local_rank, world_size, args):
    rank = int(os.environ.get("RANK", local_rank))
    loc = "npu:{}".format(local_rank)  # noqa: UP032  (as Ascend scripts write it)
    torch.npu.set_device(loc)
    torch.npu.set_compile_mode(jit_compile=False)
    torch.npu.config.allow_internal_format = False
    distributed = world_size > 1
    if distributed:
        dist.init_process_group(
            backend="hccl", init_method="env://", world_size=world_size, rank=rank
        )

    torch.manual_seed(args.seed)
    torch.npu.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).npu()
    if distributed:
        model = DDP(model, device_ids=[local_rank])
    criterion = nn.CrossEntropyLoss().npu()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = torch.npu.amp.GradScaler()

    dataset = synthetic_dataset(args.seed)
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed
    )
    loader = DataLoader(  # a worker process too: under simulate it has the stand-in
        dataset,
        batch_size=args.batch_size // world_size,
        sampler=sampler,
        drop_last=True,
        num_workers=1,
    )

    experimental_config = torch_npu.profiler._ExperimentalConfig(
        export_type=torch_npu.profiler.ExportType.Text,
        profiler_level=torch_npu.profiler.ProfilerLevel.Level1,
        aic_metrics=torch_npu.profiler.AiCMetrics.PipeUtilization,
        l2_cache=False,
        data_simplification=False,
    )
    losses = []
    with torch_npu.profiler.profile(
        activities=[
            torch_npu.profiler.ProfilerActivity.CPU,
            torch_npu.profiler.ProfilerActivity.NPU,
        ],
        schedule=torch_npu.profiler.schedule(wait=1, warmup=1, active=2, repeat=1, skip_first=0),
        on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(
            os.path.join(args.output, "prof")
        ),
        record_shapes=True,
        experimental_config=experimental_config,
    ) as prof:
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)
            for images, target in loader:
                images = images.npu(non_blocking=True)
                target = target.to(loc, non_blocking=True)
                with torch.npu.amp.autocast():
                    output = model(images)
                    loss = criterion(output, target)
                optimizer.zero_grad()
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                losses.append(loss.item())
                prof.step()
    torch.npu.synchronize()

    module = model.module if distributed else model
    report = {
        "rank": rank,
        "local_rank": local_rank,
        "world_size": world_size,
        "devices": sorted({str(p.device) for p in module.parameters()}),
        "losses": losses,
        # A feature check, as Ascend code writes it, for a name the stand-in lacks.
        "has_grouped_matmul": hasattr(torch_npu, "npu_grouped_matmul"),
    }
    try:
        torch_npu.npu_grouped_matmul(
            [images], [module[0].weight], bias=None, group_list=None, split_item=0
        )
    except AttributeError as error:
        report["refused"] = str(error)
    with open(os.path.join(args.output, "rank{}.json".format(rank)), "w") as file:  # noqa: UP032
        json.dump(report, file)
    if rank == 0:
        torch.save(
            {"epoch": args.epochs, "state_dict": module.state_dict()},
            os.path.join(args.output, "checkpoint.pth"),
        )
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

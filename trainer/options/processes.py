"""main.py's device and process flags: the device kind and indices, spawning, the ranks of
the reference's and Ascend's command lines, the rendezvous, and --shard; and the
LaunchOptions they make for devicekit."""

import argparse

from devicekit import LaunchOptions, UsageError
from devicekit.distributed import timeout_seconds
from devicekit.environments import REFERENCE_DIST_URL, parse_dist_url
from devicekit.kinds import device_choices
from trainer.options.checks import positive
from trainer.train_config import TrainConfig

TITLE = "devices and processes"


def device_list(text: str) -> list[int]:
    """--device-list's type: distinct device ids, comma-separated."""
    try:
        ids = [int(item) for item in str(text).split(",") if item.strip() != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of device ids"
        ) from None
    if not ids or len(set(ids)) != len(ids) or min(ids) < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must list distinct device ids, e.g. 0,1,2,3")
    return ids


def add_flags(group: argparse._ArgumentGroup) -> None:
    """--world-size, --rank, --dist-url, --dist-backend, --gpu, --no-accel,
    --multiprocessing-distributed, --local-rank (hidden), --addr, --port, --device,
    --device-list, --nproc-per-node, --dist-timeout, --shard."""
    group.add_argument(
        "--world-size",
        type=int,
        default=-1,
        help="nodes (with --multiprocessing-distributed) or processes (default -1: not given)",
    )
    group.add_argument(
        "--rank",
        type=int,
        default=-1,
        help="node rank (with --multiprocessing-distributed) or process rank "
        "(default -1: not given)",
    )
    group.add_argument("--dist-url", default=None, help="tcp://HOST:PORT or env://")
    group.add_argument(
        "--dist-backend",
        default=None,
        help="collective backend (default: the device's: nccl, hccl or gloo)",
    )
    group.add_argument("--gpu", type=int, default=None, help="device index to use")
    group.add_argument("--no-accel", action="store_true", help="run on the CPU")
    group.add_argument(
        "--multiprocessing-distributed",
        action="store_true",
        help="start one process per device of this node",
    )
    group.add_argument(
        "--local-rank",
        "--local_rank",
        type=int,
        default=None,
        dest="local_rank",
        help=argparse.SUPPRESS,
    )  # appended by torch.distributed.launch
    # Ascend's ResNet50 scripts
    group.add_argument("--addr", default=None, help="master address")
    group.add_argument("--port", type=int, default=None, help="master port")
    group.add_argument(
        "--device",
        default="auto",
        choices=device_choices(),
        help="device kind (default auto: npu, then cuda, then xpu, then cpu)",
    )
    group.add_argument(
        "--device-list",
        type=device_list,
        default=None,
        metavar="IDS",
        help="device ids for this node's processes, e.g. 0,1,2,3",
    )
    # ours
    group.add_argument(
        "--nproc-per-node",
        type=int,
        default=None,
        help="processes per node with --multiprocessing-distributed "
        "(default: the device count; 2 on cpu)",
    )
    group.add_argument(
        "--dist-timeout",
        type=float,
        default=None,
        help="seconds to wait for ranks and collectives (default 300)",
    )
    group.add_argument(
        "--shard",
        action="store_true",
        help="split the model's parameters, gradients and optimizer state across the "
        "ranks (devicekit.shard, FSDP2) instead of a copy on each (DDP); checkpoints "
        "stay one file that either way resumes",
    )


def check(config: TrainConfig) -> None:
    """Device indices and ranks as devicekit reads them (a malformed rank, device index or
    count is named before any work), --nproc-per-node only with spawning, and a timeout
    and --dist-url devicekit accepts."""
    # main.py has no -1 default for these: leave the flag out for "not given".
    for name, value in (("--gpu", config.gpu), ("--local-rank", config.local_rank)):
        positive(name, value, 0)
    launch_options(config)
    positive("--nproc-per-node", config.nproc_per_node)
    if config.dist_timeout is not None:
        timeout_seconds(config.dist_timeout, "--dist-timeout")
    if config.nproc_per_node is not None and not config.multiprocessing_distributed:
        raise UsageError(
            f"--nproc-per-node {config.nproc_per_node} only means something with "
            "--multiprocessing-distributed (without it main.py is one process): "
            "add --multiprocessing-distributed or drop --nproc-per-node"
        )
    if (
        config.dist_url
        and config.dist_url != REFERENCE_DIST_URL
        and not config.dist_url.startswith("env://")
    ):
        parse_dist_url(config.dist_url, "--dist-url")


def launch_options(config: TrainConfig) -> LaunchOptions:
    """The launch-related flags as devicekit LaunchOptions."""
    return LaunchOptions(
        local_rank=config.local_rank,
        gpu=config.gpu,
        rank=config.rank,
        world_size=config.world_size,
        dist_url=config.dist_url,
        addr=config.addr,
        port=config.port,
        multiprocessing_distributed=config.multiprocessing_distributed,
        nproc_per_node=config.nproc_per_node,
        device_list=None if config.device_list is None else tuple(config.device_list),
        cli=True,
    )

"""LaunchOptions: who a process is, as a script or a trainer's command line says it."""

import dataclasses
from typing import Optional, Tuple

# How each option is called in messages: by a trainer's command line, or in Python.
_FLAGS = {"local_rank": "--local-rank", "gpu": "--gpu", "rank": "--rank",
          "world_size": "--world-size", "dist_url": "--dist-url", "addr": "--addr",
          "port": "--port", "multiprocessing_distributed": "--multiprocessing-distributed",
          "nproc_per_node": "--nproc-per-node", "device_list": "--device-list"}
_PYTHON_NAMES = {"dist_url": "init_method", "nproc_per_node": "nprocs"}


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    """Who a process is, as a script or a trainer's command line says it (None: not given).

    Negative ranks and counts mean "not given", as argparse defaults of -1 do. With
    `cli=True` error messages name the command-line flags (`--rank 5`), otherwise the
    Python arguments (`rank=5`).
    """

    local_rank: Optional[int] = None  # torch.distributed.launch's --local-rank / --local_rank
    gpu: Optional[int] = None  # the device index (Ascend scripts pass --gpu $RANK_ID)
    rank: Optional[int] = None  # global rank, or the node rank when spawning
    world_size: Optional[int] = None  # ranks, or nodes when spawning
    dist_url: Optional[str] = None  # tcp://HOST:PORT or env://
    addr: Optional[str] = None  # master address (Ascend scripts' --addr)
    port: Optional[int] = None  # master port (Ascend scripts' --port)
    multiprocessing_distributed: bool = False  # spawn this node's processes
    nproc_per_node: Optional[int] = None  # processes per node when spawning
    device_list: Optional[Tuple[int, ...]] = None  # the device ids of this node's processes
    cli: bool = False

    def __post_init__(self):
        for name in ("local_rank", "gpu", "rank", "world_size"):
            value = getattr(self, name)
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                object.__setattr__(self, name, None)

    def name(self, field: str) -> str:
        """How `field` is called where the options came from (flag or Python argument)."""
        return _FLAGS[field] if self.cli else _PYTHON_NAMES.get(field, field)

    def show(self, field: str, value) -> str:
        """`--field value` on a command line, `field=value` in Python."""
        return f"{self.name(field)} {value}" if self.cli else f"{self.name(field)}={value!r}"

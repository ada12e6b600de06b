"""LaunchOptions: who a process is, as a script or a trainer's command line says it."""

import dataclasses
from collections.abc import Iterable

from devicekit.errors import UsageError

# How each option is called in messages: by a trainer's command line, or in Python.
_FLAGS = {
    "local_rank": "--local-rank",
    "gpu": "--gpu",
    "rank": "--rank",
    "world_size": "--world-size",
    "dist_url": "--dist-url",
    "addr": "--addr",
    "port": "--port",
    "multiprocessing_distributed": "--multiprocessing-distributed",
    "nproc_per_node": "--nproc-per-node",
    "device_list": "--device-list",
}
_PYTHON_NAMES = {"dist_url": "init_method", "nproc_per_node": "nprocs"}
# -1, the argparse default of scripts in the reference example's style, means "not given";
# the least value each of these takes otherwise.
_NOT_GIVEN = -1
_LEAST = {"local_rank": 0, "gpu": 0, "rank": 0, "world_size": 1}


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    """Who a process is, as a script or a trainer's command line says it (None: not given).

    -1 for a rank, device index or world size means "not given", as argparse defaults of
    -1 do; any other negative number is a UsageError naming the option. Numbers may come as
    text (`rank=os.environ["RANK"]`); one that is not an integer is a UsageError
    naming the option. With `cli=True` error messages name the command-line flags
    (`--rank 5`), otherwise the Python arguments (`rank=5`).
    """

    local_rank: int | None = None
    """The local rank `torch.distributed.launch` passes (`--local-rank`, `--local_rank`)."""
    gpu: int | None = None
    """The device index (Ascend scripts pass `--gpu $RANK_ID`)."""
    rank: int | None = None
    """The global rank, or the node rank when spawning."""
    world_size: int | None = None
    """The number of ranks, or of nodes when spawning."""
    dist_url: str | None = None
    """The init method: `tcp://HOST:PORT` or `env://`."""
    addr: str | None = None
    """The master address (Ascend scripts' `--addr`)."""
    port: int | None = None
    """The master port (Ascend scripts' `--port`)."""
    multiprocessing_distributed: bool = False
    """Whether this process spawns its node's processes."""
    nproc_per_node: int | None = None
    """The processes per node when spawning."""
    device_list: tuple[int, ...] | None = None
    """The device ids of this node's processes."""
    cli: bool = False
    """Whether error messages name command-line flags (`--rank`) or Python arguments."""

    def __post_init__(self) -> None:
        for name in ("local_rank", "gpu", "rank", "world_size", "port", "nproc_per_node"):
            value = getattr(self, name)
            if value is None:
                continue
            value = self._integer(name, value)
            if name in _LEAST and value == _NOT_GIVEN:
                value = None
            elif name in _LEAST and value < 0:
                raise UsageError(
                    f"{self.show(name, value)} must be at least {_LEAST[name]}, or "
                    f"{_NOT_GIVEN} for not given"
                )
            elif name == "port" and not 1 <= value <= 65535:
                raise UsageError(f"{self.show(name, value)} is not a TCP port: use 1..65535")
            object.__setattr__(self, name, value)
        for name in ("dist_url", "addr"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, str(getattr(self, name)))
        if self.device_list is not None:
            object.__setattr__(self, "device_list", self._device_ids(self.device_list) or None)

    def _integer(self, field: str, value: object) -> int:
        """`value` of option `field` as an int (text such as "3" too)."""
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            if isinstance(value, (bool, float)):
                raise ValueError(value)
            return int(str(value).strip())
        except ValueError:
            raise UsageError(
                f"{self.show(field, value)} is not an integer: give a whole number"
            ) from None

    def _device_ids(self, value: str | Iterable[object]) -> tuple[int, ...]:
        """The device list as distinct non-negative ints (from "0,1" too)."""
        items = value.split(",") if isinstance(value, str) else value
        try:
            ids = tuple(self._integer("device_list", item) for item in items)
        except (UsageError, TypeError):  # an item that is no integer, or not a sequence
            ids = (-1,)
        if ids and (min(ids) < 0 or len(set(ids)) != len(ids)):
            raise UsageError(
                f"{self.show('device_list', value)} must list distinct device ids, e.g. 0,1,2,3"
            )
        return ids

    def name(self, field: str) -> str:
        """How `field` is called where the options came from (flag or Python argument)."""
        return _FLAGS[field] if self.cli else _PYTHON_NAMES.get(field, field)

    def show(self, field: str, value: object) -> str:
        """`--field value` on a command line, `field=value` in Python."""
        if not self.cli:
            return f"{self.name(field)}={value!r}"
        shown = str(value)
        plain = shown.isprintable() and shown and not any(char.isspace() for char in shown)
        return f"{self.name(field)} {shown if plain else repr(value)}"

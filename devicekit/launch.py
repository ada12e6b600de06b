"""Every launcher's contract turned into one LaunchContext.

See LAUNCH.md in the design notes for the contracts. `resolve_launch` reads the
environment and the trainer's flags and answers who this process is; for
`--multiprocessing-distributed` it answers for the parent, and `for_spawned_rank`
gives each spawned child its own context.
"""

import dataclasses
import os
import re
import socket
from typing import Optional

from devicekit.errors import UsageError

DEFAULT_PORT = 29500
LOOPBACK = "127.0.0.1"
# The reference ImageNet example's default, a multicast address nothing listens on.
REFERENCE_DIST_URL = "tcp://224.66.41.62:23456"


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
    device_list: Optional[tuple] = None  # the device ids of this node's processes
    cli: bool = False

    def __post_init__(self):
        for name in ("local_rank", "gpu", "rank", "world_size"):
            value = getattr(self, name)
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                object.__setattr__(self, name, None)

    def name(self, field):
        """How `field` is called where the options came from (flag or Python argument)."""
        return _FLAGS[field] if self.cli else _PYTHON_NAMES.get(field, field)

    def show(self, field, value):
        """`--field value` on a command line, `field=value` in Python."""
        return f"{self.name(field)} {value}" if self.cli else f"{self.name(field)}={value!r}"


@dataclasses.dataclass(frozen=True)
class LaunchContext:
    """Who this process is in the run, whatever started it."""

    mode: str  # torchrun | launch | env | ascend | slurm | mpi | spawn | cli | single
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    nnodes: int
    master_addr: str
    master_port: int
    device_index: int
    device_list: tuple = None

    @property
    def distributed(self):
        """Whether more than one process takes part."""
        return self.world_size > 1

    @property
    def is_main(self):
        """Whether this is global rank 0 (the one that prints and writes)."""
        return self.rank == 0

    @property
    def init_method(self):
        """The process-group init method: env:// under torchrun-style launchers, else tcp://."""
        if self.mode in ("torchrun", "launch", "env"):
            # torchrun's workers must join the agent's store through the environment.
            return "env://"
        host = f"[{self.master_addr}]" if ":" in self.master_addr else self.master_addr
        return f"tcp://{host}:{self.master_port}"

    def for_spawned_rank(self, index):
        """The context of the `index`-th process spawned on this node (spawn mode)."""
        return dataclasses.replace(
            self, rank=self.node_rank * self.local_world_size + index, local_rank=index,
            device_index=self.device_list[index] if self.device_list else index)

    def describe(self):
        """A one-line summary for logs."""
        return (f"{self.mode}: rank {self.rank}/{self.world_size}, local rank "
                f"{self.local_rank}/{self.local_world_size}, node {self.node_rank}/{self.nnodes}, "
                f"master {self.master_addr}:{self.master_port}")


def pop_local_rank(argv):
    """Remove torch.distributed.launch's `--local-rank=N` (or `--local_rank N`, either
    spelling, either form) from `argv`; return (remaining argv, N or None)."""
    remaining, local_rank, tokens = [], None, iter(argv)
    for token in tokens:
        name, has_value, value = token.partition("=")
        if name not in ("--local-rank", "--local_rank"):
            remaining.append(token)
            continue
        if not has_value:
            value = next(tokens, None)
            if value is None:
                raise UsageError(f"{name} needs a value, e.g. {name}=0")
        local_rank = _int(value, name)
    return remaining, local_rank


def find_free_port(host=LOOPBACK):
    """A TCP port that is free on `host` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _int(value, name, minimum=0):
    try:
        number = int(str(value).strip())
    except ValueError:
        raise UsageError(f"{name}={value!r} is not an integer: set it to a whole number") from None
    if number < minimum:
        raise UsageError(f"{name}={number} must be at least {minimum}")
    return number


def _env_int(environ, name, minimum=0, fix=""):
    if name not in environ:
        raise UsageError(f"{name} is not set{fix}")
    return _int(environ[name], name, minimum)


def _port(value, name):
    port = _int(value, name, 1)
    if port > 65535:
        raise UsageError(f"{name}={port} is not a TCP port: use 1..65535")
    return port


def _parse_dist_url(url, name):
    match = re.fullmatch(r"tcp://\[?([^\]]+?)\]?:(\d+)", url.strip())
    if not match:
        raise UsageError(
            f"{name} {url!r} is not understood: use tcp://HOST:PORT or env://")
    return match.group(1), _port(match.group(2), f"{name} port")


def _master(options, environ, nnodes, default_port):
    """(addr, port) from the init method URL, addr/port options, MASTER_ADDR/MASTER_PORT,
    or loopback."""
    url = options.dist_url
    if url and url != REFERENCE_DIST_URL and not url.startswith("env://"):
        return _parse_dist_url(url, options.name("dist_url"))
    addr = options.addr or environ.get("MASTER_ADDR")
    if options.port is not None:
        port = _port(options.port, options.name("port"))
    elif "MASTER_PORT" in environ:
        port = _port(environ["MASTER_PORT"], "MASTER_PORT")
    else:
        port = default_port
    if not addr:
        if nnodes > 1:
            raise UsageError(
                f"a {nnodes}-node run needs the address of node 0: set MASTER_ADDR (or "
                f"{options.name('addr')}, or {options.name('dist_url')} tcp://HOST:PORT); "
                "devicekit uses loopback only on one node")
        addr = LOOPBACK
    if port is None:
        port = find_free_port()
    return addr, port


def _listed_device(options, local_rank, source):
    """The device of local rank `local_rank`: its entry in the device list, or the rank."""
    if not options.device_list:
        return local_rank
    if local_rank >= len(options.device_list):
        raise UsageError(f"{source}={local_rank} has no entry in {options.name('device_list')} "
                         f"{','.join(map(str, options.device_list))}: list one device per process")
    return options.device_list[local_rank]


def _check_device(ctx, kind, source):
    if kind is None or not kind.is_accelerator:
        return ctx
    count = kind.device_count()
    if ctx.device_index >= count:
        var = kind.visible_devices_env
        shown = f"{var}={os.environ[var]!r}" if var in os.environ else f"{var} unset"
        name = f"{source} {ctx.device_index}" if source.startswith("--") else \
            f"{source}={ctx.device_index!r}"
        raise UsageError(f"{name} but only {count} {kind.name} device(s) are visible ({shown}): "
                         f"use an index below {count}")
    return ctx


def _check_ranks(rank, world_size, local_rank, local_world_size, names):
    rank_name, world_name, local_name, local_world_name = names
    if rank >= world_size:
        raise UsageError(f"{rank_name}={rank} is not below {world_name}={world_size}: ranks run "
                         f"from 0 to {world_size - 1}")
    if local_rank >= local_world_size:
        raise UsageError(f"{local_name}={local_rank} is not below {local_world_name}="
                         f"{local_world_size}")
    if world_size % local_world_size:
        raise UsageError(f"{world_name}={world_size} is not a multiple of {local_world_name}="
                         f"{local_world_size}: every node must run the same number of ranks")


def _from_env(options, environ, kind):
    if options.multiprocessing_distributed:
        flag = options.name("multiprocessing_distributed")
        raise UsageError(
            f"{flag} was given but a launcher already started this process (RANK/WORLD_SIZE "
            f"are set): drop {flag}, the launcher starts one process per device")
    fix = (": the launcher must export RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and "
           "MASTER_PORT (torchrun does)")
    rank = _env_int(environ, "RANK", fix=fix)
    world_size = _env_int(environ, "WORLD_SIZE", 1, fix=fix)
    if "LOCAL_RANK" in environ:
        local_rank = _env_int(environ, "LOCAL_RANK")
        if options.local_rank is not None and options.local_rank != local_rank:
            raise UsageError(f"{options.show('local_rank', options.local_rank)} contradicts "
                             f"LOCAL_RANK={local_rank}: pass one of them")
    elif options.local_rank is not None:
        local_rank = options.local_rank
    else:
        raise UsageError("LOCAL_RANK is not set" + fix)
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if not environ.get(name):
            raise UsageError(f"{name} is not set" + fix)
    port = _port(environ["MASTER_PORT"], "MASTER_PORT")
    local_world_size = _int(environ.get("LOCAL_WORLD_SIZE", world_size), "LOCAL_WORLD_SIZE", 1)
    _check_ranks(rank, world_size, local_rank, local_world_size,
                 ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"))
    node_rank = _int(environ.get("GROUP_RANK", environ.get("NODE_RANK", rank // local_world_size)),
                     "GROUP_RANK")
    if options.gpu is not None and options.gpu != local_rank:
        raise UsageError(f"{options.show('gpu', options.gpu)} contradicts LOCAL_RANK="
                         f"{local_rank}: under a launcher leave out {options.name('gpu')}, "
                         "the device is LOCAL_RANK")
    if options.local_rank is not None:
        mode = "launch"
    elif "TORCHELASTIC_RUN_ID" in environ:
        mode = "torchrun"
    else:
        mode = "env"
    ctx = LaunchContext(mode, rank, local_rank, world_size, local_world_size, node_rank,
                        world_size // local_world_size, environ["MASTER_ADDR"], port,
                        _listed_device(options, local_rank, "LOCAL_RANK"))
    return _check_device(ctx, kind, "LOCAL_RANK" if not options.device_list
                         else options.name("device_list"))


def _from_ascend(options, environ, kind):
    local_world_size = _env_int(environ, "RANK_SIZE", 1)
    rank_id = _env_int(environ, "RANK_ID")
    nnodes, node_rank = _nodes(options, "in Ascend's RANK_ID/RANK_SIZE idiom")
    if rank_id >= local_world_size:
        raise UsageError(f"RANK_ID={rank_id} is not below RANK_SIZE={local_world_size}")
    device_index = (_listed_device(options, rank_id, "RANK_ID") if options.gpu is None
                    else _int(options.gpu, options.name("gpu")))
    addr, port = _master(options, environ, nnodes, DEFAULT_PORT)
    ctx = LaunchContext("ascend", node_rank * local_world_size + rank_id, rank_id,
                        nnodes * local_world_size, local_world_size, node_rank, nnodes,
                        addr, port, device_index)
    return _check_device(ctx, kind, options.name("gpu") if options.gpu is not None else "RANK_ID")


def _tasks_per_node(value):
    # Slurm writes e.g. "4", "4(x2)" or "4(x2),3".
    match = re.match(r"\d+", value or "")
    return int(match.group(0)) if match else None


def _from_scheduler(mode, names, options, environ, kind):
    rank_var, local_var, size_var, local_size_var = names
    rank = _env_int(environ, rank_var)
    world_size = _env_int(environ, size_var, 1)
    local_rank = _env_int(environ, local_var)
    local_world_size = (_tasks_per_node(environ.get(local_size_var))
                        if mode == "slurm" else _int(environ.get(local_size_var, world_size),
                                                     local_size_var, 1))
    if not local_world_size:
        local_world_size = world_size
    _check_ranks(rank, world_size, local_rank, local_world_size,
                 (rank_var, size_var, local_var, local_size_var))
    nnodes = world_size // local_world_size
    node_rank = _int(environ.get("SLURM_NODEID", rank // local_world_size), "SLURM_NODEID")
    addr, port = _master(options, environ, nnodes, DEFAULT_PORT)
    ctx = LaunchContext(mode, rank, local_rank, world_size, local_world_size, node_rank,
                        nnodes, addr, port, local_rank)
    return _check_device(ctx, kind, local_var)


def _spawn_parent(options, environ, kind):
    if options.device_list:
        nprocs = len(options.device_list)
        listed = ",".join(map(str, options.device_list))
        if options.nproc_per_node not in (None, nprocs):
            raise UsageError(f"{options.show('nproc_per_node', options.nproc_per_node)} "
                             f"disagrees with the {nprocs} ids of {options.name('device_list')} "
                             f"{listed}: give one of them")
        if kind is not None and kind.is_accelerator and max(options.device_list) >= kind.device_count():
            raise UsageError(f"{options.name('device_list')} {listed} names a device beyond "
                             f"the {kind.device_count()} visible {kind.name} device(s)")
    elif options.nproc_per_node is not None:
        nprocs = _int(options.nproc_per_node, options.name("nproc_per_node"), 1)
        if kind is not None and kind.is_accelerator and nprocs > kind.device_count():
            raise UsageError(
                f"{options.show('nproc_per_node', nprocs)} exceeds the {kind.device_count()} "
                f"visible {kind.name} device(s): use at most {kind.device_count()}")
    elif kind is not None:
        nprocs = kind.default_ranks_per_node()
    else:
        nprocs = 1
    nnodes, node_rank = _nodes(options, "when spawning")
    addr, port = _master(options, environ, nnodes, None if nnodes == 1 else DEFAULT_PORT)
    device_list = tuple(options.device_list) if options.device_list else None
    return LaunchContext("spawn", node_rank * nprocs, 0, nnodes * nprocs, nprocs, node_rank,
                         nnodes, addr, port, device_list[0] if device_list else 0, device_list)


def _nodes(options, when):
    """(nodes, node rank) when spawning: world_size and rank count nodes then."""
    nnodes = 1 if options.world_size is None else _int(options.world_size,
                                                       options.name("world_size"), 1)
    node_rank = 0 if options.rank is None else _int(options.rank, options.name("rank"))
    if node_rank >= nnodes:
        raise UsageError(f"{options.show('rank', node_rank)} (the node rank {when}) is not "
                         f"below {options.show('world_size', nnodes)} (the number of nodes)")
    return nnodes, node_rank


def _from_cli(options, environ, kind):
    """Each process started by hand (or by the script's own mp.spawn) with its rank."""
    if options.world_size is None:
        raise UsageError(f"{options.show('rank', options.rank)} needs "
                         f"{options.name('world_size')} (the number of processes) too; a "
                         "single process needs neither")
    world_size = _int(options.world_size, options.name("world_size"), 1)
    if options.rank is None:
        raise UsageError(f"{options.show('world_size', world_size)} needs "
                         f"{options.name('rank')} for this process too (or start the run with "
                         "torchrun)")
    rank = _int(options.rank, options.name("rank"))
    if rank >= world_size:
        raise UsageError(f"{options.show('rank', rank)} is not below "
                         f"{options.show('world_size', world_size)}")
    addr, port = _master(options, environ, 1, DEFAULT_PORT)
    if options.gpu is not None:
        device_index, source = _int(options.gpu, options.name("gpu")), options.name("gpu")
    elif options.local_rank is not None:
        device_index, source = options.local_rank, options.name("local_rank")
    else:
        # A trainer's --rank/--world-size processes each use device 0 unless told (the
        # reference's way); a script's own processes on one node use the device of their rank.
        device_index, source = (0, options.name("gpu")) if options.cli else (rank, "rank")
    ctx = LaunchContext("cli", rank, device_index, world_size, world_size, 0, 1, addr, port,
                        device_index)
    return _check_device(ctx, kind, source)


def launcher_of(environ=None):
    """The launcher family this process's environment shows ("torchrun", "env", "ascend",
    "slurm", "mpi"), or None when no launcher started it. Reads only; validates nothing."""
    environ = os.environ if environ is None else environ
    if any(name in environ for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return "torchrun" if "TORCHELASTIC_RUN_ID" in environ else "env"
    if "RANK_ID" in environ and "RANK_SIZE" in environ:
        return "ascend"
    if _count(environ, "SLURM_NTASKS") > 1 and "SLURM_PROCID" in environ:
        return "slurm"
    if _count(environ, "OMPI_COMM_WORLD_SIZE") > 1:
        return "mpi"
    return None


def _count(environ, name):
    value = environ.get(name, "")
    return int(value) if value.isdigit() else 1


def resolve_launch(options=None, environ=None, kind=None):
    """Return the LaunchContext for this process.

    `options` are the trainer's launch flags, `environ` the environment (os.environ by
    default) and `kind` the DeviceKind whose visible devices bound the device index.
    Inconsistent inputs raise UsageError naming the variable or flag.
    """
    options = options or LaunchOptions()
    environ = os.environ if environ is None else environ
    launcher = launcher_of(environ)
    if launcher in ("torchrun", "env"):
        return _from_env(options, environ, kind)
    if launcher == "ascend":
        return _from_ascend(options, environ, kind)
    if launcher == "slurm":
        return _from_scheduler("slurm", ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS",
                                         "SLURM_NTASKS_PER_NODE"), options, environ, kind)
    if launcher == "mpi":
        return _from_scheduler("mpi", ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                       "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"),
                               options, environ, kind)
    if options.multiprocessing_distributed:
        return _spawn_parent(options, environ, kind)
    if options.world_size not in (None, 1) or options.rank not in (None, 0):
        return _from_cli(options, environ, kind)
    device_index = 0 if options.gpu is None else _int(options.gpu, options.name("gpu"))
    ctx = LaunchContext("single", 0, 0, 1, 1, 0, 1, LOOPBACK, DEFAULT_PORT, device_index)
    return _check_device(ctx, kind, options.name("gpu"))

"""No launcher and no ranks given: one process, device 0 (or --gpu/gpu=)."""

from collections.abc import Mapping

from devicekit.environments.context import LaunchContext
from devicekit.environments.cross_checks import check_device
from devicekit.environments.master import DEFAULT_PORT, LOOPBACK
from devicekit.environments.options import LaunchOptions
from devicekit.environments.parsing import to_int
from devicekit.kinds.base import DeviceKind

NAME = "single"
VARIABLES: tuple[str, ...] = ()
STARTED_BY_LAUNCHER = False


def detect(environ: Mapping[str, str], options: LaunchOptions) -> bool:
    """Always: one process, when nothing else describes it."""
    return True


def context(
    options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
) -> LaunchContext:
    """The single process: rank 0 of 1, on device 0 or the one given."""
    device_index = 0 if options.gpu is None else to_int(options.gpu, options.name("gpu"))
    ctx = LaunchContext(
        mode=NAME,
        rank=0,
        local_rank=0,
        world_size=1,
        local_world_size=1,
        node_rank=0,
        nnodes=1,
        master_addr=LOOPBACK,
        master_port=DEFAULT_PORT,
        device_index=device_index,
    )
    return check_device(ctx, kind, options.name("gpu"))

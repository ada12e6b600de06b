"""A Kubeflow PyTorchJob started without torchrun: the training operator gives each pod
RANK (the pod's index, master 0), WORLD_SIZE (the pods), MASTER_ADDR and MASTER_PORT, and
Kubernetes gives every pod KUBERNETES_SERVICE_HOST/KUBERNETES_PORT; no LOCAL_RANK.

One process per pod: the pod is a node. With several processes per pod the operator sets
PET_NPROC_PER_NODE for torchrun, which the pod must then run (torchrun is detected first).
The ranks meet in devicekit's rendezvous.
"""

from collections.abc import Mapping

from devicekit.environments.context import LaunchContext
from devicekit.environments.cross_checks import (
    check_below,
    check_device,
    device_source,
    refuse_spawning,
)
from devicekit.environments.options import LaunchOptions
from devicekit.environments.parsing import (
    PORT,
    listed_device,
    read_numbers,
    require,
    to_host,
    to_int,
)
from devicekit.errors import UsageError
from devicekit.kinds.base import DeviceKind

_FIX = (
    ": a PyTorchJob's training operator exports RANK, WORLD_SIZE, MASTER_ADDR and "
    "MASTER_PORT to every pod"
)


NAME = "pytorchjob"
VARIABLES: tuple[str, ...] = (
    "RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "LOCAL_RANK",
    "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_PORT",
    "PET_NPROC_PER_NODE",
)


def detect(environ: Mapping[str, str], options: LaunchOptions) -> bool:
    """Whether a PyTorchJob's operator started this pod: RANK/WORLD_SIZE without
    LOCAL_RANK, inside Kubernetes."""
    return (
        ("RANK" in environ or "WORLD_SIZE" in environ)
        and "LOCAL_RANK" not in environ
        and ("KUBERNETES_SERVICE_HOST" in environ or "KUBERNETES_PORT" in environ)
    )


def context(
    options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
) -> LaunchContext:
    """Who this pod's process is, from the operator's variables."""
    refuse_spawning(options)
    values = read_numbers(environ, {"RANK": 0, "WORLD_SIZE": 1, "MASTER_PORT": PORT})
    per_pod = environ.get("PET_NPROC_PER_NODE", "").strip()
    if per_pod.isdigit() and to_int(per_pod, "PET_NPROC_PER_NODE") > 1:
        raise UsageError(
            f"PET_NPROC_PER_NODE={per_pod}: this PyTorchJob runs {per_pod} processes per "
            "pod, which torchrun starts: make the container's command `torchrun ...` "
            "(it reads the PET_* variables), or set nprocPerNode to 1"
        )
    rank = require(values, "RANK", _FIX)
    world_size = require(values, "WORLD_SIZE", _FIX)
    for variable in ("MASTER_ADDR", "MASTER_PORT"):
        if not environ.get(variable):
            raise UsageError(f"{variable} is not set" + _FIX)
    check_below("RANK", rank, "WORLD_SIZE", world_size, f": ranks run from 0 to {world_size - 1}")
    device_index = (
        listed_device(options, 0, "the local rank")
        if options.gpu is None
        else to_int(options.gpu, options.name("gpu"))
    )
    ctx = LaunchContext(
        mode=NAME,
        rank=rank,
        local_rank=0,
        world_size=world_size,
        local_world_size=1,
        node_rank=rank,
        nnodes=world_size,
        master_addr=to_host(environ["MASTER_ADDR"], "MASTER_ADDR"),
        master_port=values["MASTER_PORT"],
        device_index=device_index,
    )
    return check_device(ctx, kind, device_source(options, "the local rank"))

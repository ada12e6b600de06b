"""This rank's device, in the manner of torch.accelerator and torch.cuda.

Each function asks the process's device kind (cuda, npu, xpu or cpu) and, for "this rank",
the launch context. On a GPU they do what the torch.cuda function of the same name
does; on a CPU the device calls are no-ops and the allocator figures are 0.
"""

import torch

from devicekit import kinds, runtime
from devicekit.environments import LaunchContext

_MEMORY_STATISTICS = (
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
)


def device(index: int | None = None) -> torch.device:
    """This rank's torch.device (cuda:LOCAL_RANK, npu:i or cpu): the current device once
    one was bound (by init_distributed() or set_device()), as `tensor.cuda()` means on a
    GPU; with `index`, that device of this node (a CPU has one, whatever the index)."""
    kind = runtime.kind()
    if not kind.is_accelerator:
        return kind.device()
    if index is not None:
        return kind.device(int(index))
    if runtime.device_bound():
        return kind.device(kind.current_device())
    return device_for(runtime.context())


def device_for(ctx: LaunchContext) -> torch.device:
    """The torch.device the rank described by LaunchContext `ctx` computes on: its device of
    this process's kind on an accelerator, the kind's device (cpu) otherwise."""
    kind = runtime.kind()
    return kind.device(ctx.device_index) if kind.is_accelerator else kind.device()


def device_type() -> str:
    """The device kind this process runs on: "cuda", "npu", "xpu", "cpu" or a kind a script
    registered."""
    return runtime.kind().name


def is_available() -> bool:
    """Whether this process computes on an accelerator (a GPU or an NPU)."""
    return runtime.kind().is_accelerator


def is_accelerator(device: str | torch.device) -> bool:
    """Whether `device` ("cuda", "npu:1", torch.device("cpu"), a device type) is of an
    accelerator kind devicekit knows: the portable form of `"cuda" in device` or
    `device_type == "cuda"`, which are false on an NPU."""
    # The type is read from the string: torch.device("npu") fails where torch_npu is absent.
    name = device.type if isinstance(device, torch.device) else str(device).split(":")[0]
    return name in kinds.names() and kinds.get(name).is_accelerator


def accelerator_type() -> str | None:
    """The accelerator this process computes on ("cuda", "npu", "xpu"), or None on a CPU: the
    portable form of the "cuda" in `device_type == "cuda"`."""
    kind = runtime.kind()
    return kind.name if kind.is_accelerator else None


def is_bf16_supported() -> bool:
    """Whether this process's device computes in bfloat16 (as torch.cuda.is_bf16_supported()
    answers on a GPU and torch.npu's on an NPU; True on a CPU)."""
    return runtime.kind().is_bf16_supported()


def device_count() -> int:
    """How many devices of this process's kind it can see (1 on a CPU). For how many
    ranks to start on a node, see default_ranks_per_node()."""
    return runtime.kind().device_count()


def default_ranks_per_node() -> int:
    """How many ranks launch() (and launch/run_8p.sh) start on a node when not told: one
    per device; on a CPU, 2 (or 1 on a single core)."""
    return runtime.kind().default_ranks_per_node()


def backend() -> str:
    """The collective backend of this process's device: "nccl", "hccl", "xccl" or "gloo"."""
    return runtime.kind().backend


def pin_memory() -> bool:
    """Whether DataLoader should pin host memory (True when copying to an accelerator)."""
    return runtime.kind().pin_memory


def set_device(device: int | str | torch.device) -> None:
    """Make a device of this node the current one: an index, "cuda:1", torch.device(...)
    as torch.cuda.set_device takes (no-op on a CPU, whatever it is given)."""
    kind = runtime.kind()
    if not kind.is_accelerator:
        return
    if not isinstance(device, int):
        device = torch.device(device)
        device = kind.current_device() if device.index is None else device.index
    kind.set_device(device)
    runtime.bind_device()


def current_device() -> int:
    """The index of the current device (0 on a CPU)."""
    return runtime.kind().current_device()


def synchronize() -> None:
    """Wait until the current device has finished all queued work."""
    runtime.kind().synchronize()


def manual_seed(seed: int) -> None:
    """Seed the random generator of the current device (on a CPU: the CPU's)."""
    runtime.kind().manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    """Seed the random generators of every device of this kind (on a CPU: the CPU's)."""
    runtime.kind().manual_seed_all(seed)


def empty_cache() -> None:
    """Release cached, unused device memory to the device (no-op on a CPU)."""
    runtime.kind().empty_cache()


def memory_allocated() -> int:
    """Bytes held by tensors on the current device (0 on a CPU)."""
    return runtime.kind().memory("memory_allocated")


def max_memory_allocated() -> int:
    """Peak of memory_allocated() since start or reset_peak_memory_stats() (0 on a CPU)."""
    return runtime.kind().memory("max_memory_allocated")


def memory_reserved() -> int:
    """Bytes the device's caching allocator holds (0 on a CPU)."""
    return runtime.kind().memory("memory_reserved")


def max_memory_reserved() -> int:
    """Peak of memory_reserved() (0 on a CPU)."""
    return runtime.kind().memory("max_memory_reserved")


def reset_peak_memory_stats() -> None:
    """Start the max_memory_* figures afresh (no-op on a CPU)."""
    runtime.kind().reset_peak_memory_stats()

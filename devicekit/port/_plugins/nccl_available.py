"""Rule `nccl-available`: `torch.distributed.is_nccl_available()` -> `devicekit.is_available()`.

Scripts ask it to choose their backend (`"nccl" if dist.is_nccl_available() else "gloo"`,
`elif use_gpu and dist.is_nccl_available(): backend = ...`). On an Ascend machine torch is
a CPU build without NCCL, so the question is false there and the script falls back to
gloo, which has no NPU collectives (`No backend type associated with device type npu`).
What it means is "does this machine have the accelerator whose backend I want", which
devicekit answers on every kind. Left alone where it guards code for CUDA only."""

import libcst as cst

from devicekit.port.branches import guards_device_only_code
from devicekit.port.nodes import devicekit_call
from devicekit.port.rule import Port

RULES = ("nccl-available",)

_NCCL_AVAILABLE = {
    "torch.distributed.is_nccl_available",
    "torch.distributed.distributed_c10d.is_nccl_available",
}


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    return bool(qualified & _NCCL_AVAILABLE)


def on_call(
    port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """dist.is_nccl_available() -> devicekit.is_available()."""
    if updated.args or guards_device_only_code(port, original):
        return None
    return port.changed(original, "nccl-available", devicekit_call("is_available"))

"""Rule `ddp-device-ids`: `DistributedDataParallel(model, device_ids=[i], output_device=i)`
keeps the same ids where there is an accelerator and passes none on a CPU (where DDP
refuses them): `device_ids=[i] if devicekit.is_available() else None`."""

import libcst as cst

from devicekit.port.nodes import bound_args
from devicekit.port.rule import Port

RULES = ("ddp-device-ids",)

_DDP = {
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
}
_DDP_PARAMS = ("module", "device_ids", "output_device")


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    return bool(qualified & _DDP)


def on_call(
    port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """DDP(model, device_ids=[i], output_device=i): the same ids where there is an
    accelerator, none on a CPU."""
    bound = bound_args(updated, _DDP_PARAMS)
    result = port.accelerator_only(
        updated, {name: bound.get(name) for name in ("device_ids", "output_device")}
    )
    if result is updated:
        return None
    return port.changed(
        original, "ddp-device-ids", port.keywords(original, result, qualified, None)[0]
    )

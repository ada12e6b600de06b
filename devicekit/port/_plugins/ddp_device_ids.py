"""Rule `ddp-device-ids`: `DistributedDataParallel(model, device_ids=[i], output_device=i)`
keeps the same ids where there is an accelerator and passes none on a CPU (where DDP
refuses them): `device_ids=[i] if devicekit.is_available() else None`."""

from typing import TYPE_CHECKING

import libcst as cst

from devicekit.port import names
from devicekit.port._plugins import call
from devicekit.port.nodes import bound_args

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer


@call(lambda port, qualified, method: bool(qualified & names.DDP))
def ddp_device_ids(
    port: "PortTransformer", original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """DDP(model, device_ids=[i], output_device=i): the same ids where there is an
    accelerator, none on a CPU."""
    bound = bound_args(updated, names.DDP_PARAMS)
    result = port.accelerator_only(
        updated, {name: bound.get(name) for name in ("device_ids", "output_device")}
    )
    if result is updated:
        return None
    return port.changed(
        original, "ddp-device-ids", port.keywords(original, result, qualified, None)[0]
    )

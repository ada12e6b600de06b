"""Rule `fsdp-device-id`: FSDP1's `FullyShardedDataParallel(model,
device_id=torch.cuda.current_device(), sync_module_states=True)` gets this rank's device as
a torch.device (FSDP reads an index as an accelerator's, and needs `cpu` said on a CPU),
and syncs module states where there is an accelerator (FSDP broadcasts them from
accelerators only; CPU ranks start from their own, equally seeded, initialization):
`device_id=devicekit.device(), sync_module_states=devicekit.is_available()`."""

from typing import TYPE_CHECKING

import libcst as cst

from devicekit.port import names
from devicekit.port._plugins import call
from devicekit.port.nodes import bound_args, device_call, is_devicekit_call, replace_arg_value

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer


def _on_this_device(
    port: "PortTransformer", original: cst.Call, updated: cst.Call, arg: cst.Arg | None
) -> cst.Call:
    if arg is None:
        return updated
    if is_devicekit_call(arg.value, "current_device") and not arg.value.args:
        return replace_arg_value(updated, arg, device_call(None))
    return port.port_arg(original, updated, arg, "device", allow_int=True) or updated


@call(lambda port, qualified, method: bool(qualified & names.FSDP))
def fsdp_device_id(
    port: "PortTransformer", original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """FSDP(model, device_id=torch.cuda.current_device(), sync_module_states=True) ->
    FSDP(model, device_id=devicekit.device(), sync_module_states=devicekit.is_available())."""
    result = _on_this_device(
        port, original, updated, bound_args(updated, names.FSDP_PARAMS).get("device_id")
    )
    result = port.accelerator_flag(
        result, bound_args(result, names.FSDP_PARAMS).get("sync_module_states")
    )
    if result is updated:
        return None
    return port.changed(
        original, "fsdp-device-id", port.keywords(original, result, qualified, None)[0]
    )

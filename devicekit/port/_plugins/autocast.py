"""Rule `autocast`: `torch.cuda.amp.autocast(...)`, `torch.autocast("cuda", ...)` ->
`devicekit.autocast(enabled=..., dtype=...)`, on (enabled=True) unless the script said
otherwise. `cache_enabled=` or arguments that cannot be read are reported for a manual
change; an autocast for another device (`torch.autocast("cpu")`) is left alone."""

from typing import TYPE_CHECKING

import libcst as cst

from devicekit.port import names
from devicekit.port._plugins import call
from devicekit.port.nodes import (
    bound_args,
    devicekit_call,
    is_devicekit_call,
    keyword,
    parse_device_string,
)

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer


@call(lambda port, qualified, method: bool(qualified & (names.AUTOCAST | names.DEVICE_AUTOCAST)))
def autocast(
    port: "PortTransformer", original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """torch.cuda.amp.autocast(...), torch.autocast("cuda", ...) -> devicekit.autocast(
    enabled=..., dtype=...)."""
    params = names.AUTOCAST_PARAMS if qualified & names.AUTOCAST else names.DEVICE_AUTOCAST_PARAMS
    bound = bound_args(updated, params)
    if len(bound) != len(updated.args):
        port.report(original, names.REASONS["autocast-args"])
        return updated
    if params is names.DEVICE_AUTOCAST_PARAMS:
        device = bound.get("device_type")
        if device is None or not (
            parse_device_string(device.value) is None
            or (
                is_devicekit_call(device.value, "device_type")
                and device.value is not original.args[0].value
            )
        ):
            return None
    if "cache_enabled" in bound:
        port.report(original, names.REASONS["autocast-args"])
        return updated
    enabled = bound["enabled"].value if "enabled" in bound else cst.Name("True")
    args = [keyword("enabled", enabled)]
    if "dtype" in bound:
        args.append(keyword("dtype", bound["dtype"].value))
    return port.changed(original, "autocast", devicekit_call("autocast", *args))

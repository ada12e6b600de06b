"""Rule `to-device`: `x.to("cuda")`, `x.to(f"cuda:{i}")`, `x.to(local_rank)`,
`x.to(device="cuda")` -> `x.to(devicekit.device(...))`."""

from typing import TYPE_CHECKING

import libcst as cst

from devicekit.port._plugins import call

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer


@call(lambda port, qualified, method: method == "to")
def to_device(
    port: "PortTransformer", original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """x.to("cuda"), x.to(f"cuda:{i}"), x.to(local_rank) -> x.to(devicekit.device(...))."""
    for position, arg in enumerate(updated.args):
        if (arg.keyword is None and position == 0) or (
            arg.keyword is not None and arg.keyword.value == "device"
        ):
            ported = port.port_arg(original, updated, arg, "device", allow_int=True)
            if ported is not None:
                return port.changed(original, "to-device", ported)
    return None

"""Rule `init-process-group`: `init_process_group("nccl", ...)` (and `new_group`) ->
`init_process_group(devicekit.backend(), ...)`: the script's own rank, world size and
init_method are kept; a `device_id=` (which must be an accelerator) is passed only where
there is one. Its keyword arguments are ported as for any call (see backend)."""

from typing import TYPE_CHECKING

import libcst as cst

from devicekit.port import names
from devicekit.port._plugins import call
from devicekit.port.nodes import bound_args

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer


@call(lambda port, qualified, method: bool(qualified & names.INIT_PROCESS_GROUP))
def init_process_group(
    port: "PortTransformer", original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """init_process_group("nccl", device_id=d) -> init_process_group(devicekit.backend(),
    device_id=d if devicekit.is_available() else None)."""
    result = updated
    if updated.args and updated.args[0].keyword is None:
        result = port.port_arg(original, updated, updated.args[0], "backend") or updated
    result = port.keywords(original, result, qualified, None)[0]
    result = port.accelerator_only(result, {"device_id": bound_args(result, ()).get("device_id")})
    return None if result is updated else port.changed(original, "init-process-group", result)

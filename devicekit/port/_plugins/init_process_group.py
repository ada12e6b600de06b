"""Rule `init-process-group`: `init_process_group("nccl", ...)` (and `new_group`) ->
`init_process_group(devicekit.backend(), ...)`: the script's own rank, world size and
init_method are kept; a `device_id=` (which must be an accelerator) is passed only where
there is one. Its keyword arguments are ported as for any call (see keyword_arguments)."""

import libcst as cst

from devicekit.port.nodes import bound_args
from devicekit.port.rule import Port

RULES = ("init-process-group",)

_INIT_PROCESS_GROUP = {
    "torch.distributed.init_process_group",
    "torch.distributed.new_group",
    "torch.distributed.distributed_c10d.init_process_group",
    "torch.distributed.distributed_c10d.new_group",
}


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    return bool(qualified & _INIT_PROCESS_GROUP)


def on_call(
    port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """init_process_group("nccl", device_id=d) -> init_process_group(devicekit.backend(),
    device_id=d if devicekit.is_available() else None)."""
    result = updated
    if updated.args and updated.args[0].keyword is None:
        result = port.port_arg(original, updated, updated.args[0], "backend") or updated
    result = port.keywords(original, result, qualified, None)[0]
    result = port.accelerator_only(result, {"device_id": bound_args(result, ()).get("device_id")})
    return None if result is updated else port.changed(original, "init-process-group", result)

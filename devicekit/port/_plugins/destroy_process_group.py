"""Rule `destroy-process-group`: `destroy_process_group()` ->
`devicekit.destroy_process_group()`: the same, and it lets gloo's worker threads finish
before the interpreter exits (else a finished CPU run can still abort at exit)."""

import libcst as cst

from devicekit.port.nodes import devicekit_call
from devicekit.port.rule import Port

RULES = ("destroy-process-group",)

_DESTROY = {
    "torch.distributed.destroy_process_group",
    "torch.distributed.distributed_c10d.destroy_process_group",
}


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    return bool(qualified & _DESTROY)


def on_call(
    port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """destroy_process_group() -> devicekit.destroy_process_group()."""
    if updated.args:
        return None
    return port.changed(original, "destroy-process-group", devicekit_call("destroy_process_group"))

"""Rule `destroy-process-group`: `destroy_process_group()` ->
`devicekit.destroy_process_group()`: the same, and it lets gloo's worker threads finish
before the interpreter exits (else a finished CPU run can still abort at exit)."""

from typing import TYPE_CHECKING

import libcst as cst

from devicekit.port import names
from devicekit.port._plugins import call
from devicekit.port.nodes import devicekit_call

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer


@call(lambda port, qualified, method: bool(qualified & names.DESTROY))
def destroy_process_group(
    port: "PortTransformer", original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """destroy_process_group() -> devicekit.destroy_process_group()."""
    if updated.args:
        return None
    return port.changed(original, "destroy-process-group", devicekit_call("destroy_process_group"))

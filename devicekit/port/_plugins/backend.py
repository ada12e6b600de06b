"""Rule `backend`: `backend="nccl"` (of any call: `init_process_group(backend="nccl")`,
`new_group`, a user's own setup function) -> `backend=devicekit.backend()`, "nccl" on a
GPU."""

from typing import TYPE_CHECKING

import libcst as cst

from devicekit.port._plugins import keyword

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer


@keyword("backend", "backend")
def backend(
    port: "PortTransformer",
    original: cst.Call,
    updated: cst.Call,
    arg: cst.Arg,
    qualified: set[str],
    method: str | None,
) -> cst.Call | None:
    """backend="nccl" -> backend=devicekit.backend()."""
    return port.port_arg(original, updated, arg, "string")

"""Rule `argparse-default`: `parser.add_argument(..., default="nccl")` ->
`default=devicekit.backend()`, and `default="cuda"` -> `default=devicekit.device_type()`:
the option's default is the device's own, and still a string."""

from typing import TYPE_CHECKING

import libcst as cst

from devicekit.port._plugins import keyword

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer


@keyword("default", "argparse-default")
def argparse_default(
    port: "PortTransformer",
    original: cst.Call,
    updated: cst.Call,
    arg: cst.Arg,
    qualified: set[str],
    method: str | None,
) -> cst.Call | None:
    """add_argument(..., default="nccl") -> add_argument(..., default=devicekit.backend())."""
    if method != "add_argument":
        return None
    return port.port_arg(original, updated, arg, "string")

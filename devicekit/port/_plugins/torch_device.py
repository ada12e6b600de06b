"""Rule `torch-device`: `torch.device("cuda")`, `torch.device("cuda", i)`,
`torch.device(f"cuda:{i}")`, `torch.device(0)` -> `devicekit.device(...)`."""

from typing import TYPE_CHECKING

import libcst as cst

from devicekit.port import names
from devicekit.port._plugins import call
from devicekit.port.nodes import bound_args, device_call, parse_device_string

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer


@call(lambda port, qualified, method: bool(qualified & names.TORCH_DEVICE))
def torch_device(
    port: "PortTransformer", original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.BaseExpression | None:
    """torch.device("cuda"), torch.device("cuda", i), torch.device(f"cuda:{i}"),
    torch.device(local_rank) -> devicekit.device(...)."""
    bound = bound_args(updated, names.TORCH_DEVICE_PARAMS)
    kind = bound.get("type")
    if kind is None or len(bound) != len(updated.args):
        return None
    if "index" in bound:
        if parse_device_string(kind.value) is None:
            return port.changed(original, "torch-device", device_call(bound["index"].value))
        return None
    position = next(i for i, a in enumerate(updated.args) if a is kind)
    # torch.device(0) is cuda:0; a name passed to torch.device may hold a device already
    value = port.value(
        original.args[position].value,
        kind.value,
        "device",
        allow_int=isinstance(kind.value, cst.Integer),
    )
    if value is None:
        return None
    return port.changed(original, "torch-device", value)

"""Rule `torch-device`: `torch.device("cuda")`, `torch.device("cuda", i)`,
`torch.device(f"cuda:{i}")`, `torch.device(0)` -> `devicekit.device(...)`."""

import libcst as cst

from devicekit.port.nodes import bound_args, device_call, parse_device_string
from devicekit.port.rule import Port

RULES = ("torch-device",)

_TORCH_DEVICE = {"torch.device"}
_TORCH_DEVICE_PARAMS = ("type", "index")


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    return bool(qualified & _TORCH_DEVICE)


def on_call(
    port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.BaseExpression | None:
    """torch.device("cuda"), torch.device("cuda", i), torch.device(f"cuda:{i}"),
    torch.device(local_rank) -> devicekit.device(...)."""
    bound = bound_args(updated, _TORCH_DEVICE_PARAMS)
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

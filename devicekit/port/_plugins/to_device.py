"""Rule `to-device`: `x.to("cuda")`, `x.to(f"cuda:{i}")`, `x.to(local_rank)`,
`x.to(device="cuda")` -> `x.to(devicekit.device(...))`."""

import libcst as cst

from devicekit.port.rule import Port

RULES = ("to-device",)


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    return method == "to"


def on_call(
    port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]
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

"""Rule `device-argument`: `torch.set_default_device("cuda")` ->
`torch.set_default_device(devicekit.device())`. (`device=` of any call is a row of
keyword_arguments, reported as the same rule.)"""

import libcst as cst

from devicekit.port.rule import Port

RULES = ("device-argument",)

_SET_DEFAULT_DEVICE = {"torch.set_default_device"}


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    return bool(qualified & _SET_DEFAULT_DEVICE)


def on_call(
    port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """torch.set_default_device("cuda") -> torch.set_default_device(devicekit.device())."""
    if not updated.args or updated.args[0].keyword is not None:
        return None
    ported = port.port_arg(original, updated, updated.args[0], "device")
    return None if ported is None else port.changed(original, "device-argument", ported)

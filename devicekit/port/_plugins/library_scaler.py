"""Rule `library-scaler`: a loss scaler of an installed library that builds a CUDA
GradScaler unless told the device: timm's `NativeScaler()` -> `NativeScaler(
device=devicekit.device_type())`.

Its default device is "cuda"; off CUDA torch's GradScaler then disables itself with a
warning that is easy to miss, and an NPU trains fp16 with no loss scaling. timm takes
`device=` from 1.0.12 (October 2024); an older timm refuses the argument at once
(TypeError), which says to upgrade, rather than train unscaled."""

import libcst as cst

from devicekit.port.nodes import devicekit_call, keyword
from devicekit.port.rule import Port

RULES = ("library-scaler",)

_TIMM_NATIVE_SCALER = {"timm.utils.NativeScaler", "timm.utils.cuda.NativeScaler"}


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    return bool(qualified & _TIMM_NATIVE_SCALER)


def on_call(
    port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """NativeScaler() -> NativeScaler(device=devicekit.device_type())."""
    if updated.args:
        return None  # `device=` given: ported as a device argument, if it is a literal
    return port.changed(
        original,
        "library-scaler",
        updated.with_changes(args=[keyword("device", devicekit_call("device_type"))]),
    )

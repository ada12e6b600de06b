"""Rule `autocast`: `torch.cuda.amp.autocast(...)`, `torch.autocast("cuda", ...)` ->
`devicekit.autocast(enabled=..., dtype=...)`. The script's own `enabled=` is kept; without
one, `enabled=devicekit.is_available()`: on where an accelerator computes, as the original
was on its GPU, and off on a CPU, where a CUDA autocast does nothing and the original
trained in fp32 (forcing it on would run bf16 there, emulated and about 2x slower on a CPU
without bf16 instructions). `cache_enabled=` or arguments that cannot be read are reported
for a manual change; an autocast for another device (`torch.autocast("cpu")`) is left
alone.

A ported autocast that may compute in float16 (no dtype, or one that is not bfloat16) in
a file that trains (calls `.backward`) and names no loss scaler (nothing called
`*scaler*`, no apex `scale_loss`) is also reported: fp16 gradients underflow without
loss scaling, on an NPU as on a GPU."""

import libcst as cst

from devicekit.port import names
from devicekit.port.nodes import (
    bound_args,
    code,
    devicekit_call,
    is_devicekit_call,
    keyword,
    parse_device_string,
)
from devicekit.port.rule import Port

RULES = ("autocast",)

_DEVICE_AUTOCAST = {"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"}
# The positional parameters, in order, of the two autocasts.
_AUTOCAST_PARAMS = ("enabled", "dtype", "cache_enabled")
_DEVICE_AUTOCAST_PARAMS = ("device_type", "dtype", "enabled", "cache_enabled")

_UNSCALED = (
    "autocasts in float16 on a GPU or an NPU, and nothing in this file builds or calls a "
    "loss scaler: small fp16 gradients underflow to zero without one",
    "build scaler = devicekit.GradScaler(enabled=True) and step through it "
    "(scaler.scale(loss).backward(), scaler.step(optimizer), scaler.update()), or autocast "
    "with dtype=torch.bfloat16 where devicekit.is_bf16_supported(); nothing to do if "
    "another file scales this loss",
)


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    return bool(qualified & (names.AUTOCAST | _DEVICE_AUTOCAST))


def on_call(
    port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """torch.cuda.amp.autocast(...), torch.autocast("cuda", ...) -> devicekit.autocast(
    enabled=... or devicekit.is_available(), dtype=...)."""
    params = _AUTOCAST_PARAMS if qualified & names.AUTOCAST else _DEVICE_AUTOCAST_PARAMS
    bound = bound_args(updated, params)
    if len(bound) != len(updated.args):
        port.report(original, names.REASONS["autocast-args"])
        return updated
    if params is _DEVICE_AUTOCAST_PARAMS:
        device = bound.get("device_type")
        if device is None or not (
            parse_device_string(device.value) is None
            or (
                is_devicekit_call(device.value, "device_type")
                and device.value is not original.args[0].value
            )
        ):
            return None
    if "cache_enabled" in bound:
        port.report(original, names.REASONS["autocast-args"])
        return updated
    facts = port.facts
    if (
        facts.names_backward
        and not facts.names_a_scaler
        and "bfloat16" not in code(bound.get("dtype", updated))
    ):
        port.report(original, _UNSCALED)
    enabled = bound["enabled"].value if "enabled" in bound else devicekit_call("is_available")
    args = [keyword("enabled", enabled)]
    if "dtype" in bound:
        args.append(keyword("dtype", bound["dtype"].value))
    return port.changed(original, "autocast", devicekit_call("autocast", *args))

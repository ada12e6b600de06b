"""Rule `grad-scaler`: `torch.cuda.amp.GradScaler(...)`, `torch.amp.GradScaler("cuda", ...)`,
`torch.npu.amp.GradScaler(...)` -> `devicekit.GradScaler(enabled=True, ...)`: a real scaler
on a GPU or an NPU, as before. Arguments that cannot be read, and torch_npu's static
scaling (`dynamic=False`), are reported for a manual change; a scaler for another device is
left alone."""

import libcst as cst
import libcst.matchers as m

from devicekit.port import names
from devicekit.port.nodes import bound_args, devicekit_call, keyword, parse_device_string
from devicekit.port.rule import Port

RULES = ("grad-scaler",)

_NPU_GRAD_SCALER = {
    "torch.npu.amp.GradScaler",
    "torch_npu.npu.amp.GradScaler",
    "torch.npu.amp.grad_scaler.GradScaler",
    "torch_npu.npu.amp.grad_scaler.GradScaler",
}
_DEVICE_GRAD_SCALER = {
    "torch.amp.GradScaler",
    "torch.amp.grad_scaler.GradScaler",
    "torch.GradScaler",
}  # "cuda" unless told
_DEVICE_GRAD_SCALER_PARAMS = ("device",) + names.CUDA_GRAD_SCALER_PARAMS
_NPU_GRAD_SCALER_PARAMS = (
    "init_scale",
    "growth_factor",
    "backoff_factor",
    "growth_interval",
    "dynamic",
    "enabled",
)


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    return bool(qualified & (names.CUDA_GRAD_SCALER | _DEVICE_GRAD_SCALER))


def on_call(
    port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """torch.cuda.amp.GradScaler(...), torch.amp.GradScaler("cuda", ...) ->
    devicekit.GradScaler(enabled=True, ...)."""
    params: tuple[str, ...]
    if qualified & _NPU_GRAD_SCALER:
        params = _NPU_GRAD_SCALER_PARAMS
    elif qualified & names.CUDA_GRAD_SCALER:
        params = names.CUDA_GRAD_SCALER_PARAMS
    else:
        params = _DEVICE_GRAD_SCALER_PARAMS
    bound = bound_args(updated, params)
    dynamic = bound.pop("dynamic", None)  # torch_npu's; True is every scaler's behaviour
    if len(bound) + (dynamic is not None) != len(updated.args) or (
        dynamic is not None and not m.matches(dynamic.value, m.Name("True"))
    ):
        port.report(original, names.REASONS["grad-scaler-args"])
        return updated
    device = bound.pop("device", None)
    if device is not None and parse_device_string(device.value) is not None:
        return None
    enabled = bound["enabled"].value if "enabled" in bound else cst.Name("True")
    args = [keyword("enabled", enabled)]
    args += [
        keyword(name, bound[name].value) for name in params if name in bound and name != "enabled"
    ]
    return port.changed(original, "grad-scaler", devicekit_call("GradScaler", *args))

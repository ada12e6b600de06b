"""Mixed precision on any device: autocast with the device's type and dtype, and a
GradScaler that is always an object (a no-op where no loss scaling is needed)."""

from typing import Any

import torch

from devicekit import runtime

DType = str | torch.dtype | None


def amp_enabled(enabled: bool | None = None) -> bool:
    """`enabled`, or the device's default when None: on where it was measured to pay
    (CUDA GPUs; CPUs with native bf16), off elsewhere (NPU: opt in, as Ascend's scripts do)."""
    return runtime.kind().default_amp() if enabled is None else bool(enabled)


def amp_dtype(dtype: DType = None) -> torch.dtype:
    """The low-precision dtype autocast uses here: `dtype` ("float16", "bfloat16", a
    torch.dtype) or the device's default (float16 on GPUs and NPUs, bfloat16 on CPUs)."""
    return runtime.kind().amp_dtype(dtype)


def prefers_channels_last(amp: bool) -> bool:
    """Whether channels_last memory format is the faster choice for convolutions on this
    device, with mixed precision on (`amp`) or off (measured: yes with AMP on GPUs and on
    CPUs with native bf16; no in fp32)."""
    return runtime.kind().prefers_channels_last(amp)


def autocast(enabled: bool | None = None, dtype: DType = None) -> torch.autocast:
    """torch.autocast for this process's device type (a GPU's "cuda", an NPU's "npu":
    `torch.autocast("cuda")` on an NPU only warns and runs in fp32).

    `enabled=None` follows the device's default (see amp_enabled); `dtype` defaults to the
    device's low-precision type: float16 on GPUs and NPUs, bfloat16 on CPUs.
    """
    kind = runtime.kind()
    return torch.autocast(
        device_type=kind.autocast_device_type,
        dtype=kind.amp_dtype(dtype),
        enabled=amp_enabled(enabled),
    )


def GradScaler(
    enabled: bool | None = None,
    dtype: DType = None,
    **kwargs: Any,
) -> torch.amp.GradScaler:
    """A torch.amp.GradScaler for this device that scales the loss only when mixed
    precision is on (`enabled`, default: the device's) in float16: bfloat16 and float32
    keep fp32's exponent range and need no loss scaling. Otherwise it is a no-op scaler:
    `scale(loss)` returns the loss, `step(optimizer)` steps, `update()` does nothing, so
    one training loop serves every case. `kwargs` (init_scale, growth_interval, ...) go
    to torch.amp.GradScaler.
    """
    kind = runtime.kind()
    scaling = amp_enabled(enabled) and kind.needs_grad_scaler(kind.amp_dtype(dtype))
    return kind.grad_scaler(enabled=scaling, **kwargs)

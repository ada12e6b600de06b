"""Mixed precision for any kind: autocast with the kind's dtype, a GradScaler only for float16."""

import contextlib

import torch


def autocast(kind, enabled=True, dtype=None):
    """An autocast context for `kind` (its default low-precision dtype unless `dtype` is given);
    a no-op context when disabled."""
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device_type=kind.name, dtype=kind.amp_dtype(dtype))


def grad_scaler(kind, enabled=True, dtype=None, init_scale=2.0**16):
    """A (dynamic) GradScaler when float16 AMP is on `kind`, else None: bfloat16 and fp32
    keep fp32's exponent range and need no loss scaling."""
    if not enabled or not kind.needs_grad_scaler(kind.amp_dtype(dtype)):
        return None
    return torch.amp.GradScaler(kind.name, init_scale=float(init_scale))

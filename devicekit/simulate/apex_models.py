"""What the stand-in's apex.amp.initialize (ascend_apex.py) does to models, as Ascend's
apex does (NVIDIA apex's amp/_initialize.py with Ascend's patch/npu.patch): refuse those
not on the NPU or already float16, cast them for O2 and O3, cast their forward's inputs and
outputs."""

import functools
from typing import Any

import torch
from torch.nn.modules.batchnorm import _BatchNorm

__all__ = ["cast", "cast_forward", "check"]


def check(models: list[torch.nn.Module], device_type: str) -> None:
    """Refuse, as apex does, a model that is not a Module, is already float16, or is not
    on the device (`device_type`)."""
    for model in models:
        if not isinstance(model, torch.nn.Module):
            raise RuntimeError(
                f"amp.initialize: models must be torch.nn.Module, got {type(model).__name__}"
            )
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            if not tensor.is_floating_point():
                continue
            if tensor.dtype == torch.float16:
                raise RuntimeError(
                    f"amp.initialize: {name!r} is already float16: pass the model in "
                    "float32 (do not call .half() first); amp casts it as the opt_level says"
                )
            if tensor.device.type != device_type:
                raise RuntimeError(
                    f"amp.initialize: {name!r} is on {tensor.device}, not on the NPU: move "
                    "the model there first (model.npu()), as Ascend's apex requires"
                )


def cast(model: torch.nn.Module, dtype: torch.dtype, keep_batchnorm: bool) -> None:
    """Cast the floating parameters (in place: optimizers keep them) and buffers of
    `model` to `dtype`, those of affine batch norms aside when `keep_batchnorm`."""
    for module in model.modules():
        if keep_batchnorm and isinstance(module, _BatchNorm) and module.affine:
            continue
        for param in module.parameters(recurse=False):
            if param.is_floating_point():
                param.data = param.data.to(dtype)
        for name, buffer in module.named_buffers(recurse=False):
            if buffer.is_floating_point():
                module._buffers[name] = buffer.to(dtype)


def _cast(value: Any, dtype: torch.dtype) -> Any:
    """`value` with each floating tensor in it (in lists, tuples, dicts) cast to `dtype`."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, dict):
        return {key: _cast(item, dtype) for key, item in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_cast(item, dtype) for item in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(item, dtype) for item in value)
    return value


def cast_forward(model: torch.nn.Module, inputs: torch.dtype | None, outputs: torch.dtype) -> None:
    """Make `model`'s forward cast floating inputs to `inputs` (unless None) and floating
    outputs to `outputs`."""
    forward = model.forward

    @functools.wraps(forward)
    def casting_forward(*args: Any, **kwargs: Any) -> Any:
        if inputs is not None:
            args, kwargs = _cast(args, inputs), _cast(kwargs, inputs)
        return _cast(forward(*args, **kwargs), outputs)

    model.forward = casting_forward

"""What the fused operators' references share: the dtype they compute in, a context that
keeps autocast out of their arithmetic, and the one-line errors they raise."""

import contextlib
from collections.abc import Iterator

import torch


def compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    """float32 for float16, bfloat16 and float32 inputs (as the NPU kernels accumulate),
    float64 for float64 ones (so that gradcheck sees the op's own precision)."""
    return torch.promote_types(tensor.dtype, torch.float32)


@contextlib.contextmanager
def no_autocast(device: torch.device) -> Iterator[None]:
    """Autocast off on `device` for the duration: a fused operator is one kernel that
    autocast does not split, so its matmuls must not be cast to float16 inside it."""
    if device.type != "meta" and torch.is_autocast_enabled(device.type):
        with torch.autocast(device.type, enabled=False):
            yield
    else:
        yield


def refuse(op: str, problem: str, fix: str) -> RuntimeError:
    """The RuntimeError an operator raises for arguments the real one rejects too."""
    return RuntimeError(f"torch_npu.{op}: {problem}: {fix}")


def not_simulated(op: str, feature: str) -> NotImplementedError:
    """The error for a feature the real operator has and this reference does not."""
    return NotImplementedError(
        f"torch_npu.{op}: {feature} is not provided by the npu stand-in: it needs a real "
        "Ascend NPU with torch_npu 2.13.0"
    )


def broadcasts_to(tensor: torch.Tensor, target: torch.Size) -> bool:
    """Whether `tensor` broadcasts to the shape `target` without growing it."""
    pairs = zip(reversed(tensor.shape), reversed(target), strict=False)
    return tensor.dim() <= len(target) and all(size in (1, want) for size, want in pairs)

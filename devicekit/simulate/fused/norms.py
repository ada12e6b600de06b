"""torch_npu's fused RMS normalisations, as PyTorch references: `npu_rms_norm` and
`npu_add_rms_norm`.

Both compute in float32 (float64 for float64 inputs) and return y in the input's dtype and
rstd = 1 / sqrt(mean(x^2) + epsilon) in that computing dtype, shaped as the input with 1 in each
normalised (gamma's) dimension (torch_npu/op_plugin/meta/_meta_registrations.py:2832,
2858). They are differentiable in x and gamma, as the real operators are.
"""

import torch

from devicekit.simulate.fused import _common

__all__ = ["npu_add_rms_norm", "npu_rms_norm"]


def _normalise(
    op: str, x: torch.Tensor, gamma: torch.Tensor, epsilon: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, rstd) of the RMS norm of `x` over gamma's trailing dimensions."""
    if gamma.dim() == 0 or gamma.dim() > x.dim() or gamma.shape != x.shape[x.dim() - gamma.dim() :]:
        raise _common.refuse(
            op,
            f"gamma of shape {list(gamma.shape)} is not the trailing dimensions of the input's "
            f"shape {list(x.shape)}",
            "pass a gamma shaped as the last dimension(s) of the input, e.g. [hidden]",
        )
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    wide = x.to(_common.compute_dtype(x))
    rstd = torch.rsqrt(wide.pow(2).mean(dim=dims, keepdim=True) + epsilon)
    y = wide * rstd * gamma.to(wide.dtype)
    return y.to(x.dtype), rstd


def npu_rms_norm(
    self: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-06
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, rstd): y = self * rstd * gamma, rstd = 1 / sqrt(mean(self^2) + epsilon), the
    mean taken over gamma's dimensions (the last ones of self)."""
    return _normalise("npu_rms_norm", self, gamma, epsilon)


def npu_add_rms_norm(
    x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-06
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, rstd, x): x = x1 + x2 (the residual sum, in x1's dtype), then y and rstd as
    npu_rms_norm gives them for x."""
    if x1.shape != x2.shape:
        raise _common.refuse(
            "npu_add_rms_norm",
            f"x1 {list(x1.shape)} and x2 {list(x2.shape)} differ in shape",
            "pass two tensors of the same shape",
        )
    x = (x1 + x2).to(x1.dtype)
    y, rstd = _normalise("npu_add_rms_norm", x, gamma, epsilon)
    return y, rstd, x

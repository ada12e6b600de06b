"""torch_npu's fused activations, as PyTorch references: `npu_swiglu` and
`npu_scaled_masked_softmax`. Each computes in float32 (float64 for float64 inputs), returns
the input's dtype and is differentiable in its tensor input, as the real operators are."""

import torch

from devicekit.simulate.fused import _common

__all__ = ["npu_scaled_masked_softmax", "npu_swiglu"]

# What masked scores become before the softmax (Megatron's fill, which Ascend's own accuracy
# checker uses for this operator): a row masked everywhere comes out uniform, not NaN.
_MASKED_SCORE = -10000.0


def npu_swiglu(self: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """swish(A) * B = A * sigmoid(A) * B, where A and B are the first and second halves
    of `self` along `dim`."""
    if not -self.dim() <= dim < self.dim() or self.shape[dim] % 2:
        raise _common.refuse(
            "npu_swiglu",
            f"dim={dim} of an input of shape {list(self.shape)} is not a dimension of even size",
            "split along a dimension that holds the two halves (gate, then up)",
        )
    gate, up = self.to(_common.compute_dtype(self)).chunk(2, dim=dim)
    return (torch.nn.functional.silu(gate) * up).to(self.dtype)


def npu_scaled_masked_softmax(
    x: torch.Tensor, mask: torch.Tensor, scale: float = 1.0, fixed_triu_mask: bool = False
) -> torch.Tensor:
    """softmax(x * scale) over the last dimension, where `mask` is True (masked out) the
    score replaced by -10000 first; with fixed_triu_mask, the upper triangle of the last
    two dimensions (column > row) is masked instead of `mask`."""
    if x.dim() < 2:
        raise _common.refuse(
            "npu_scaled_masked_softmax",
            f"x of shape {list(x.shape)} has fewer than 2 dimensions",
            "pass scores shaped [..., rows, columns]",
        )
    if fixed_triu_mask:
        rows, columns = x.shape[-2:]
        mask = torch.ones(rows, columns, dtype=torch.bool, device=x.device).triu(1)
    elif not _common.broadcasts_to(mask, x.shape):
        raise _common.refuse(
            "npu_scaled_masked_softmax",
            f"mask of shape {list(mask.shape)} does not broadcast to x's shape {list(x.shape)}",
            "pass a mask that broadcasts to x",
        )
    scores = (x.to(_common.compute_dtype(x)) * scale).masked_fill(mask.bool(), _MASKED_SCORE)
    return torch.softmax(scores, dim=-1).to(x.dtype)

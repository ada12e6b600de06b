"""torch_npu's fused rotary position embedding, as a PyTorch reference: `npu_rotary_mul`.

output = r1 * input + r2 * rotated(input), r1 and r2 the cos and sin tables broadcast to the
4-D input (torch_npu/_op_plugin_docs.py, npu_rotary_mul). rotated() is, in 'half' mode,
cat(-x2, x1) of the input's two halves along the last dimension (the rotate_half of LLaMA
code); in 'interleave' mode, each pair (a, b) of the last dimension becomes (-b, a); with
`rotate` given, input @ rotate. Computed in float32 (float64 for float64 inputs), returned
in the input's dtype, differentiable in input, r1 and r2 (not in rotate, as on the NPU).
"""

import torch

from devicekit.simulate.fused import _common

__all__ = ["npu_rotary_mul"]

_MODES = ("half", "interleave")


def _rotated(x: torch.Tensor, rotary_mode: str) -> torch.Tensor:
    if rotary_mode == "half":
        first, second = x.chunk(2, dim=-1)
        return torch.cat((-second, first), dim=-1)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((-odd, even), dim=-1).flatten(-2)


def npu_rotary_mul(
    input: torch.Tensor,  # torch_npu's name for it
    r1: torch.Tensor,
    r2: torch.Tensor,
    rotary_mode: str = "half",
    rotate: torch.Tensor | None = None,
) -> torch.Tensor:
    """r1 * input + r2 * rotated(input): rotary position embedding of a 4-D input (BNSD,
    BSND or SBND) whose last dimension is the head's, with cos table r1 and sin table r2."""
    op = "npu_rotary_mul"
    if rotary_mode not in _MODES:
        raise _common.refuse(
            op, f"rotary_mode={rotary_mode!r} is not a mode", "use 'half' or 'interleave'"
        )
    if input.dim() != 4 or input.shape[-1] % 2:
        raise _common.refuse(
            op,
            f"input of shape {list(input.shape)} is not 4-D with an even last dimension",
            "pass q or k as [B, N, S, D], [B, S, N, D] or [S, B, N, D] (unsqueeze a 3-D one)",
        )
    for name, table in (("r1", r1), ("r2", r2)):
        if not _common.broadcasts_to(table, input.shape):
            raise _common.refuse(
                op,
                f"{name} of shape {list(table.shape)} does not broadcast to input's "
                f"{list(input.shape)}",
                "pass cos/sin tables shaped as the input, with 1 in the broadcast dimensions",
            )
    wide = input.to(_common.compute_dtype(input))
    if rotate is None:
        rotated = _rotated(wide, rotary_mode)
    else:
        head = input.shape[-1]
        if rotate.shape != (head, head):
            raise _common.refuse(
                op,
                f"rotate of shape {list(rotate.shape)} is not [D, D] for D = {head}",
                f"pass a [{head}, {head}] rotation matrix",
            )
        with _common.no_autocast(input.device):
            rotated = wide @ rotate.detach().to(wide.dtype)
    output = r1.to(wide.dtype) * wide + r2.to(wide.dtype) * rotated
    return output.to(input.dtype)

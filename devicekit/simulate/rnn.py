"""Kernels for the fused RNN cells, which torch uses on every device but the CPU and which
have no CPU kernel the stand-in could borrow: the gate arithmetic of nn.LSTM and nn.GRU,
written with ordinary operators (that run on the stand-in like any other)."""

import torch
from torch import Tensor

_library: torch.library.Library | None = None


def _paired(hidden_bias: Tensor | None, op: str) -> Tensor:
    """The hidden bias of a cell given an input bias: the cells take both or neither."""
    if hidden_bias is None:
        raise RuntimeError(f"aten::{op}: input_bias was given without hidden_bias")
    return hidden_bias


def _lstm_cell(
    input_gates: Tensor,
    hidden_gates: Tensor,
    cx: Tensor,
    input_bias: Tensor | None = None,
    hidden_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + _paired(hidden_bias, "_thnn_fused_lstm_cell")
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


def _lstm_cell_backward(
    grad_hy: Tensor | None,
    grad_cy: Tensor | None,
    cx: Tensor,
    cy: Tensor,
    workspace: Tensor,
    has_bias: bool,
) -> tuple[Tensor, Tensor, Tensor | None]:
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_hy = torch.zeros_like(cy) if grad_hy is None else grad_hy
    grad_c = (torch.zeros_like(cy) if grad_cy is None else grad_cy) + grad_hy * o * (
        1 - tanh_cy * tanh_cy
    )
    grad_gates = torch.cat(
        [
            grad_c * g * i * (1 - i),
            grad_c * cx * f * (1 - f),
            grad_c * i * (1 - g * g),
            grad_hy * tanh_cy * o * (1 - o),
        ],
        1,
    )
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_c * f, grad_bias


def _gru_cell(
    input_gates: Tensor,
    hidden_gates: Tensor,
    hx: Tensor,
    input_bias: Tensor | None = None,
    hidden_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    if input_bias is not None:
        hidden_bias = _paired(hidden_bias, "_thnn_fused_gru_cell")
        input_gates, hidden_gates = input_gates + input_bias, hidden_gates + hidden_bias
    in_r, in_z, in_n = input_gates.chunk(3, 1)
    h_r, h_z, h_n = hidden_gates.chunk(3, 1)
    r = (in_r + h_r).sigmoid()
    z = (in_z + h_z).sigmoid()
    n = (in_n + r * h_n).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, h_n, hx, n], 1)


def _gru_cell_backward(
    grad_hy: Tensor, workspace: Tensor, has_bias: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
    r, z, h_n, hx, n = workspace.chunk(5, 1)
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_z = grad_hy * (hx - n) * z * (1 - z)
    grad_r = grad_n * h_n * r * (1 - r)
    grad_input = torch.cat([grad_r, grad_z, grad_n], 1)
    grad_hidden = torch.cat([grad_r, grad_z, grad_n * r], 1)
    grad_input_bias = grad_input.sum(0) if has_bias else None
    grad_hidden_bias = grad_hidden.sum(0) if has_bias else None
    return grad_input, grad_hidden, grad_hy * z, grad_input_bias, grad_hidden_bias


def register() -> None:
    """Give the fused RNN cells (and their backward) kernels on the npu device."""
    global _library
    if _library is not None:
        return
    # torch.library.Library is unannotated
    _library = torch.library.Library("aten", "IMPL")  # type: ignore[no-untyped-call]
    for name, kernel in (
        ("_thnn_fused_lstm_cell", _lstm_cell),
        ("_thnn_fused_lstm_cell_backward_impl", _lstm_cell_backward),
        ("_thnn_fused_gru_cell", _gru_cell),
        ("_thnn_fused_gru_cell_backward", _gru_cell_backward),
    ):
        _library.impl(name, kernel, "PrivateUse1")  # type: ignore[no-untyped-call]

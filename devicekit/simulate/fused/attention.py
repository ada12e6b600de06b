"""torch_npu's fused attention, as a PyTorch reference: `npu_fusion_attention`.

attention_out = Dropout(Softmax(Mask(scale * (query @ key^T + pse), atten_mask)), keep_prob)
@ value, as torch_npu/_op_plugin_docs.py states it for this operator (its pse example adds
pse after the scale instead; the formula is followed here). Scores, softmax and the product
with value are computed in float32 (float64 for float64 inputs); attention_out comes back in
query's dtype, differentiable in query, key, value and pse.

Layouts BSH, SBH, BSND and BNSD (case-insensitive), grouped-query attention (fewer key/value
heads than query heads, query head h reading key/value head h // (Nq / Nkv)). atten_mask is
True (or 1) where a score is masked out; when it is None nothing is masked, whatever
sparse_mode says (the docs' constraint). sparse_mode 0 applies atten_mask and the band of
pre_tockens/next_tockens counted from the top-left corner, 1 atten_mask alone; 2, 3 and 4
take atten_mask as the compressed 2048x2048 triangle the docs ask for and build their own:
2 causal from the top-left corner, 3 causal from the bottom-right corner, 4 the band of
pre_tockens/next_tockens counted from the bottom-right corner. A row with every score
masked gives zeros. The prefix modes (5, 6), the varlen modes (7, 8, TND, actual_seq_*) are
not simulated and say so.

Its seven returns, shaped as the meta registration shapes them
(torch_npu/op_plugin/meta/_meta_registrations.py:2271): attention_out; softmax_max and
softmax_sum, float32 [B, N, Sq, 8] (each row's max of the masked, scaled scores and the sum
of their exponentials after subtracting it, repeated 8 times); softmax_out, an empty tensor;
and the ints seed, offset (0 here: dropout draws from torch's generator, not a Philox
stream) and numels = B * N * Sq * Skv.
"""

import torch

from devicekit.simulate.fused import _common

__all__ = ["npu_fusion_attention"]

_OP = "npu_fusion_attention"
_DIMS = {"BSH": 3, "SBH": 3, "BSND": 4, "BNSD": 4}
_SIMULATED_MODES = (0, 1, 2, 3, 4)


def _heads_first(tensor: torch.Tensor, layout: str, heads: int) -> torch.Tensor:
    """`tensor` in `layout` as [B, N, S, D]."""
    if layout == "BNSD":
        return tensor
    if layout == "BSND":
        return tensor.transpose(1, 2)
    if layout == "BSH":
        batch, length, hidden = tensor.shape
        return tensor.reshape(batch, length, heads, hidden // heads).transpose(1, 2)
    length, batch, hidden = tensor.shape  # SBH
    return tensor.reshape(length, batch, heads, hidden // heads).permute(1, 2, 0, 3)


def _to_layout(out: torch.Tensor, layout: str) -> torch.Tensor:
    """[B, N, S, D] `out` in `layout`."""
    batch, heads, length, dim = out.shape
    if layout == "BNSD":
        return out
    if layout == "BSND":
        return out.transpose(1, 2).contiguous()
    if layout == "BSH":
        return out.transpose(1, 2).reshape(batch, length, heads * dim)
    return out.permute(2, 0, 1, 3).reshape(length, batch, heads * dim)  # SBH


def _head_counts(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, head_num: int, layout: str
) -> tuple[int, int]:
    """(query heads, key/value heads), checked against head_num and one another."""
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        if tensor.dim() != _DIMS[layout]:
            raise _common.refuse(
                _OP,
                f"{name} of shape {list(tensor.shape)} is not {_DIMS[layout]}-D as "
                f"input_layout={layout!r} needs",
                "pass tensors in the layout named, or name the layout they are in",
            )
    if layout in ("BSH", "SBH"):
        if query.shape[2] % head_num:
            raise _common.refuse(
                _OP,
                f"query's hidden size {query.shape[2]} is not a multiple of head_num={head_num}",
                "pass head_num as the number of query heads",
            )
        head_dim = query.shape[2] // head_num
        kv_heads = key.shape[2] // head_dim if key.shape[2] % head_dim == 0 else 0
        if kv_heads and value.shape[2] % kv_heads:
            kv_heads = 0
    else:
        axis = 1 if layout == "BNSD" else 2
        if query.shape[axis] != head_num:
            raise _common.refuse(
                _OP,
                f"query {list(query.shape)} has {query.shape[axis]} heads in {layout}, "
                f"not head_num={head_num}",
                "pass head_num as the number of query heads",
            )
        kv_heads = key.shape[axis] if value.shape[axis] == key.shape[axis] else 0
    if kv_heads == 0 or head_num % kv_heads:
        raise _common.refuse(
            _OP,
            f"key {list(key.shape)} and value {list(value.shape)} do not hold a number of "
            f"heads that divides head_num={head_num} ({layout})",
            "give key and value Nkv heads of query's head size, with head_num a multiple of Nkv",
        )
    return head_num, kv_heads


def _band(
    rows: int, columns: int, pre: int, after: int, shift: int, device: torch.device
) -> torch.Tensor:
    """True outside the band: column - row - shift > after, or row + shift - column > pre."""
    row = torch.arange(rows, device=device).unsqueeze(1)
    column = torch.arange(columns, device=device).unsqueeze(0)
    distance = column - row - shift
    return (distance > after) | (-distance > pre)


def _masked(
    atten_mask: torch.Tensor | None,
    sparse_mode: int,
    pre_tockens: int,
    next_tockens: int,
    rows: int,
    columns: int,
    device: torch.device,
) -> torch.Tensor | None:
    """Where the scores [.., rows, columns] are masked out (True), or None for nowhere."""
    if atten_mask is None:
        return None
    if sparse_mode == 2:
        return _band(rows, columns, rows + columns, 0, 0, device)
    if sparse_mode == 3:
        return _band(rows, columns, rows + columns, 0, columns - rows, device)
    if sparse_mode == 4:
        return _band(rows, columns, pre_tockens, next_tockens, columns - rows, device)
    if atten_mask.dim() not in (2, 4) or tuple(atten_mask.shape[-2:]) != (rows, columns):
        raise _common.refuse(
            _OP,
            f"atten_mask of shape {list(atten_mask.shape)} is not [Sq, Skv] = [{rows}, {columns}] "
            "(or B/1, N/1 before them)",
            "pass a mask of the scores' shape, True where a score is masked out",
        )
    given = atten_mask.to(device=device, dtype=torch.bool)
    if sparse_mode == 0 and min(pre_tockens, next_tockens) < max(rows, columns):
        return given | _band(rows, columns, pre_tockens, next_tockens, 0, device)
    return given


def _check_supported(
    layout: str,
    keep_prob: float,
    head_num: int,
    sparse_mode: int,
    actual_seq_qlen: list[int] | None,
    actual_seq_kvlen: list[int] | None,
    softmax_layout: str,
) -> None:
    if layout == "TND" or actual_seq_qlen is not None or actual_seq_kvlen is not None:
        raise _common.not_simulated(
            _OP, "the varlen form (input_layout 'TND', actual_seq_qlen/kvlen)"
        )
    if layout not in _DIMS:
        raise _common.refuse(
            _OP, f"input_layout={layout!r} is not a layout", "use BSH, SBH, BSND, BNSD or TND"
        )
    if softmax_layout:
        raise _common.refuse(
            _OP, f"softmax_layout={softmax_layout!r} is for TND only", "leave it at its default"
        )
    if not 0 < keep_prob <= 1:
        raise _common.refuse(
            _OP, f"keep_prob={keep_prob} is outside (0, 1]", "pass 1 - dropout rate"
        )
    if head_num <= 0:
        raise _common.refuse(
            _OP, f"head_num={head_num} is not positive", "pass the number of heads"
        )
    if sparse_mode not in _SIMULATED_MODES:
        if 5 <= sparse_mode <= 8:
            raise _common.not_simulated(_OP, f"sparse_mode={sparse_mode} (prefix and varlen masks)")
        raise _common.refuse(_OP, f"sparse_mode={sparse_mode} is not a mode", "use 0 to 8")


def npu_fusion_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_num: int,
    input_layout: str,
    pse: torch.Tensor | None = None,
    padding_mask: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    scale: float = 1.0,
    keep_prob: float = 1.0,
    pre_tockens: int = 2147483647,
    next_tockens: int = 2147483647,
    inner_precise: int = 0,
    prefix: list[int] | None = None,
    actual_seq_qlen: list[int] | None = None,
    actual_seq_kvlen: list[int] | None = None,
    sparse_mode: int = 0,
    gen_mask_parallel: bool = True,
    sync: bool = False,
    softmax_layout: str = "",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, int, int]:
    """(attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels) of
    scaled dot-product attention, as the module docstring details. padding_mask (which
    torch_npu does not support yet), inner_precise, gen_mask_parallel and sync change
    nothing here; prefix is for sparse_mode 5 and 6."""
    layout = input_layout.upper()
    _check_supported(
        layout, keep_prob, head_num, sparse_mode, actual_seq_qlen, actual_seq_kvlen, softmax_layout
    )
    heads, kv_heads = _head_counts(query, key, value, head_num, layout)
    wide = _common.compute_dtype(query)
    q = _heads_first(query, layout, heads).to(wide)
    k = _heads_first(key, layout, kv_heads).to(wide)
    v = _heads_first(value, layout, kv_heads).to(wide)
    if kv_heads != heads:
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
    batch, _, rows, head_dim = q.shape
    columns = k.shape[2]
    if (k.shape[0], k.shape[3]) != (batch, head_dim) or v.shape[:3] != k.shape[:3]:
        raise _common.refuse(
            _OP,
            f"query {list(query.shape)}, key {list(key.shape)} and value "
            f"{list(value.shape)} do not agree in {layout}",
            "give all three the same batch, key and value the same length, query and key "
            "the same head size",
        )
    if pse is not None and not _common.broadcasts_to(
        pse, torch.Size((batch, heads, rows, columns))
    ):
        raise _common.refuse(
            _OP,
            f"pse of shape {list(pse.shape)} does not broadcast to [B, N, Sq, Skv] = "
            f"{[batch, heads, rows, columns]}",
            "pass it as BNSS, BN1Skv or 1NSS (the compressed alibi form is not simulated)",
        )
    masked = _masked(atten_mask, sparse_mode, pre_tockens, next_tockens, rows, columns, q.device)
    with _common.no_autocast(query.device):
        scores = q @ k.transpose(-1, -2)
        if pse is not None:
            scores = scores + pse.to(wide)
        scores = scores * scale
        if masked is not None:
            scores = scores.masked_fill(masked, float("-inf"))
        row_max = scores.detach().amax(dim=-1, keepdim=True)
        shifted = scores - torch.where(row_max.isfinite(), row_max, 0.0)
        weights = shifted.exp()
        total = weights.sum(dim=-1, keepdim=True)
        probs = weights / torch.where(total > 0, total, 1.0)
        if keep_prob < 1:
            probs = torch.nn.functional.dropout(probs, p=1 - keep_prob)
        out = (probs @ v).to(query.dtype)
    stats = (batch, heads, rows, 8)
    softmax_max = row_max.detach().float().expand(stats).contiguous()
    softmax_sum = total.detach().float().expand(stats).contiguous()
    softmax_out = query.new_empty(0)
    return (
        _to_layout(out, layout),
        softmax_max,
        softmax_sum,
        softmax_out,
        0,
        0,
        rows * columns * batch * heads,
    )

"""The npu stand-in's fused operators (devicekit/simulate/fused/) against hand-written
references of what torch_npu 2.13.0 documents for them, on CPU tensors (the references run
on any device): values in float32 and bfloat16, every layout's shapes, gradients through
gradcheck in float64, masks, and the one-line refusals."""

import math

import pytest
import torch
import torch.nn.functional as F

from devicekit.simulate import fused
from devicekit.simulate.fused.activations import npu_scaled_masked_softmax, npu_swiglu
from devicekit.simulate.fused.attention import npu_fusion_attention
from devicekit.simulate.fused.layout import (
    get_npu_format,
    npu_confusion_transpose,
    npu_format_cast,
)
from devicekit.simulate.fused.norms import npu_add_rms_norm, npu_rms_norm
from devicekit.simulate.fused.rotary import npu_rotary_mul

BF16 = {"atol": 3e-2, "rtol": 2e-2}  # bfloat16 keeps 8 bits of mantissa


def randn(*shape, dtype=torch.float32, seed=0, grad=False):
    generator = torch.Generator().manual_seed(seed)
    tensor = torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)
    return tensor.requires_grad_(grad)


def gradcheck(function, *inputs):
    assert torch.autograd.gradcheck(function, inputs, eps=1e-6, atol=1e-5)


# -- npu_rms_norm, npu_add_rms_norm ------------------------------------------------------------


def rms_norm_by_hand(x, gamma, eps):
    x = x.double()
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    rms = x.pow(2).mean(dims, keepdim=True).add(eps).sqrt()
    return x / rms * gamma.double(), 1 / rms


@pytest.mark.parametrize("gamma_shape", [(16,), (4, 16)], ids=["last-dim", "last-two-dims"])
def test_rms_norm_matches_the_formula_with_an_fp32_rstd_of_the_meta_shape(gamma_shape):
    x, gamma = randn(3, 4, 16), randn(*gamma_shape, seed=1)
    y, rstd = npu_rms_norm(x, gamma, epsilon=1e-5)
    want_y, want_rstd = rms_norm_by_hand(x, gamma, 1e-5)
    torch.testing.assert_close(y, want_y.float())
    torch.testing.assert_close(rstd, want_rstd.float())
    assert rstd.dtype == torch.float32
    assert rstd.shape == (3, 4, 1) if len(gamma_shape) == 1 else (3, 1, 1)


def test_rms_norm_in_bf16_keeps_bf16_and_an_fp32_rstd():
    x, gamma = randn(2, 8, 64, dtype=torch.bfloat16), randn(64, dtype=torch.bfloat16, seed=1)
    y, rstd = npu_rms_norm(x, gamma)
    assert (y.dtype, rstd.dtype) == (torch.bfloat16, torch.float32)
    torch.testing.assert_close(y.float(), rms_norm_by_hand(x, gamma, 1e-6)[0].float(), **BF16)


def test_rms_norm_gradients():
    gradcheck(
        lambda x, g: npu_rms_norm(x, g)[0],
        randn(2, 3, 5, dtype=torch.float64, grad=True),
        randn(5, dtype=torch.float64, seed=1, grad=True),
    )


def test_add_rms_norm_returns_the_norm_its_rstd_and_the_sum():
    x1, x2, gamma = randn(2, 4, 8), randn(2, 4, 8, seed=1), randn(8, seed=2)
    y, rstd, total = npu_add_rms_norm(x1, x2, gamma)
    torch.testing.assert_close(total, x1 + x2)
    want_y, want_rstd = rms_norm_by_hand(x1 + x2, gamma, 1e-6)
    torch.testing.assert_close(y, want_y.float())
    torch.testing.assert_close(rstd, want_rstd.float())


def test_rms_norm_refuses_a_gamma_that_is_not_the_last_dimension():
    with pytest.raises(RuntimeError, match=r"^torch_npu\.npu_rms_norm: gamma of shape \[8\] is"):
        npu_rms_norm(randn(2, 16), randn(8))


# -- npu_fusion_attention -------------------------------------------------------------------------


def attention_by_hand(q, k, v, scale, masked=None, pse=None):
    """softmax(scale * (q k^T + pse)) v per head, [B, N, S, D] in float64, masked scores
    left out (a row with none left gives zeros)."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-1, -2)
    if pse is not None:
        scores = scores + pse.double()
    scores = scores * scale
    if masked is not None:
        scores = scores.masked_fill(masked, -math.inf)
    probs = torch.softmax(scores, -1).nan_to_num(0.0)
    return probs @ v, scores


def mask_where(rows, columns, masked):
    """A [rows, columns] bool mask, True where masked(i, j)."""
    return torch.tensor([[masked(i, j) for j in range(columns)] for i in range(rows)])


B, N, S, D = 2, 4, 6, 8


def to_layout(t, layout):
    """A [B, N, S, D] tensor in `layout`."""
    b, n, s, d = t.shape
    return {
        "BNSD": t,
        "BSND": t.transpose(1, 2),
        "BSH": t.transpose(1, 2).reshape(b, s, n * d),
        "SBH": t.permute(2, 0, 1, 3).reshape(s, b, n * d),
    }[layout].contiguous()


@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
def test_fusion_attention_in_each_layout_returns_the_seven_documented_outputs(layout):
    q, k, v = randn(B, N, S, D), randn(B, N, 10, D, seed=1), randn(B, N, 10, D, seed=2)
    scale = 1 / math.sqrt(D)
    out, softmax_max, softmax_sum, softmax_out, seed, offset, numels = npu_fusion_attention(
        to_layout(q, layout), to_layout(k, layout), to_layout(v, layout), N, layout, scale=scale
    )
    want, scores = attention_by_hand(q, k, v, scale)
    assert out.shape == to_layout(want, layout).shape
    torch.testing.assert_close(out, to_layout(want, layout).float())
    assert softmax_max.shape == softmax_sum.shape == (B, N, S, 8)
    assert softmax_max.dtype == softmax_sum.dtype == torch.float32
    row_max = scores.amax(-1, keepdim=True)
    torch.testing.assert_close(softmax_max, row_max.expand(B, N, S, 8).float())
    row_sum = (scores - row_max).exp().sum(-1, keepdim=True)
    torch.testing.assert_close(softmax_sum, row_sum.expand(B, N, S, 8).float())
    assert softmax_out.shape == (0,) and softmax_out.dtype == q.dtype
    assert (seed, offset, numels) == (0, 0, B * N * S * 10)


def test_fusion_attention_layout_names_are_case_insensitive():
    q = randn(B, S, N * D)
    lower = npu_fusion_attention(q, q, q, N, "bsh")[0]
    torch.testing.assert_close(lower, npu_fusion_attention(q, q, q, N, "BSH")[0])


@pytest.mark.parametrize("layout", ["BSH", "BNSD"])
def test_fusion_attention_grouped_query_heads_read_their_groups_key_value_head(layout):
    q, k, v = randn(B, N, S, D), randn(B, 2, S, D, seed=1), randn(B, 2, S, D, seed=2)
    out = npu_fusion_attention(
        to_layout(q, layout), to_layout(k, layout), to_layout(v, layout), N, layout, scale=0.3
    )[0]
    # query heads 0-1 read key/value head 0, heads 2-3 head 1
    want, _ = attention_by_hand(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), 0.3)
    torch.testing.assert_close(out, to_layout(want, layout).float())


def test_fusion_attention_in_bf16_returns_bf16_close_to_fp32():
    q, k, v = (randn(B, S, N, D, dtype=torch.bfloat16, seed=s) for s in range(3))
    out = npu_fusion_attention(q, k, v, N, "BSND", scale=0.35)[0]
    assert out.dtype == torch.bfloat16
    want, _ = attention_by_hand(*(t.transpose(1, 2) for t in (q, k, v)), 0.35)
    torch.testing.assert_close(out.float(), want.transpose(1, 2).float(), **BF16)


def test_fusion_attention_atten_mask_true_masks_out_bool_or_uint8():
    q, k, v = randn(B, N, S, D), randn(B, N, S, D, seed=1), randn(B, N, S, D, seed=2)
    padding = torch.zeros(B, 1, S, S, dtype=torch.bool)
    padding[0, ..., 4:] = True  # the first sequence's last two keys are padding
    want, _ = attention_by_hand(q, k, v, 0.5, masked=padding)
    for mask in (padding, padding.to(torch.uint8)):
        out = npu_fusion_attention(q, k, v, N, "BNSD", atten_mask=mask, scale=0.5)[0]
        torch.testing.assert_close(out, want.float())


@pytest.mark.parametrize(
    ("sparse_mode", "pre", "after", "rows", "masked"),
    [
        (2, 65536, 0, 6, lambda i, j: j > i),  # leftUpCausal
        (3, 65536, 0, 6, lambda i, j: j > i + 4),  # rightDownCausal: Sq=6, Skv=10
        (3, 65536, 0, 10, lambda i, j: j > i),
        (4, 2, 1, 6, lambda i, j: j - i - 4 > 1 or i + 4 - j > 2),  # band from bottom-right
    ],
    ids=["2-left-up-causal", "3-right-down-causal", "3-square", "4-band"],
)
def test_fusion_attention_sparse_modes_build_their_mask_from_the_compressed_one(
    sparse_mode, pre, after, rows, masked
):
    q, k, v = randn(B, N, rows, D), randn(B, N, 10, D, seed=1), randn(B, N, 10, D, seed=2)
    compressed = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    out = npu_fusion_attention(
        q,
        k,
        v,
        N,
        "BNSD",
        atten_mask=compressed,
        scale=0.4,
        sparse_mode=sparse_mode,
        pre_tockens=pre,
        next_tockens=after,
    )[0]
    want, _ = attention_by_hand(q, k, v, 0.4, masked=mask_where(rows, 10, masked))
    torch.testing.assert_close(out, want.float())


def test_fusion_attention_causal_matches_torchs_causal_attention():
    q, k, v = randn(B, S, N, D), randn(B, S, N, D, seed=1), randn(B, S, N, D, seed=2)
    causal = torch.ones(S, S, dtype=torch.bool).triu(1)
    out = npu_fusion_attention(
        q, k, v, N, "BSND", atten_mask=causal, scale=1 / math.sqrt(D), next_tockens=0
    )[0]
    want = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=True)
    torch.testing.assert_close(out, want.transpose(1, 2))


def test_fusion_attention_mode_0_also_keeps_to_the_pre_and_next_tockens_band():
    q, k, v = randn(1, N, S, D), randn(1, N, S, D, seed=1), randn(1, N, S, D, seed=2)
    nothing = torch.zeros(S, S, dtype=torch.bool)
    out = npu_fusion_attention(
        q, k, v, N, "BNSD", atten_mask=nothing, pre_tockens=1, next_tockens=2
    )[0]
    want, _ = attention_by_hand(
        q, k, v, 1.0, masked=mask_where(S, S, lambda i, j: not -1 <= j - i <= 2)
    )
    torch.testing.assert_close(out, want.float())


def test_fusion_attention_without_atten_mask_masks_nothing_whatever_the_mode():
    q = randn(1, N, S, D)
    full = npu_fusion_attention(q, q, q, N, "BNSD")[0]
    torch.testing.assert_close(npu_fusion_attention(q, q, q, N, "BNSD", sparse_mode=3)[0], full)


def test_fusion_attention_fully_masked_rows_give_zeros_and_finite_gradients():
    q = randn(1, 1, 3, 4, grad=True)
    mask = torch.tensor([[False, True, True], [True, True, True], [False, False, True]])
    out = npu_fusion_attention(q, q, q, 1, "BNSD", atten_mask=mask)[0]
    assert out[0, 0, 1].eq(0).all()
    out.sum().backward()
    assert q.grad.isfinite().all()


def test_fusion_attention_adds_pse_before_the_scale():
    q, k, v = randn(B, N, S, D), randn(B, N, S, D, seed=1), randn(B, N, S, D, seed=2)
    pse = randn(1, N, S, S, seed=3)
    out = npu_fusion_attention(q, k, v, N, "BNSD", pse=pse, scale=0.25)[0]
    torch.testing.assert_close(out, attention_by_hand(q, k, v, 0.25, pse=pse)[0].float())


def test_fusion_attention_keep_prob_drops_attention_weights_as_torchs_dropout():
    q, k, v = randn(B, N, S, D), randn(B, N, S, D, seed=1), randn(B, N, S, D, seed=2)
    torch.manual_seed(7)
    out = npu_fusion_attention(q, k, v, N, "BNSD", keep_prob=0.75)[0]
    probs = torch.softmax((q @ k.transpose(-1, -2)).double(), -1)
    torch.manual_seed(7)
    kept = F.dropout(torch.ones_like(probs, dtype=torch.float32), p=0.25)  # 0 or 1/0.75
    torch.testing.assert_close(out, ((probs * kept) @ v.double()).float())
    assert not torch.allclose(out, npu_fusion_attention(q, k, v, N, "BNSD")[0])


def test_fusion_attention_is_one_kernel_that_autocast_does_not_split():
    q = randn(B, S, N * D)
    plain = npu_fusion_attention(q, q, q, N, "BSH", scale=0.3)[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = npu_fusion_attention(q, q, q, N, "BSH", scale=0.3)[0]
    assert inside.dtype == torch.float32
    torch.testing.assert_close(inside, plain)


def test_fusion_attention_gradients():
    q, k, v = (randn(1, 2, 3, 4, dtype=torch.float64, seed=s, grad=True) for s in range(3))
    pse = randn(1, 2, 3, 3, dtype=torch.float64, seed=3, grad=True)
    causal = torch.ones(3, 3, dtype=torch.bool).triu(1)
    gradcheck(
        lambda q, k, v, pse: npu_fusion_attention(
            q, k, v, 2, "BNSD", pse=pse, atten_mask=causal, scale=0.5
        )[0],
        q,
        k,
        v,
        pse,
    )
    q = randn(1, 3, 8, dtype=torch.float64, seed=4, grad=True)  # 2 heads of 4
    k, v = (randn(1, 3, 4, dtype=torch.float64, seed=s, grad=True) for s in (5, 6))  # 1 head
    gradcheck(lambda q, k, v: npu_fusion_attention(q, k, v, 2, "BSH")[0], q, k, v)


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({"sparse_mode": 6}, NotImplementedError, "sparse_mode=6 (prefix and varlen masks) is not"),
        ({"input_layout": "TND"}, NotImplementedError, "the varlen form"),
        ({"actual_seq_qlen": [6, 12]}, NotImplementedError, "the varlen form"),
        ({"input_layout": "BHS"}, RuntimeError, "input_layout='BHS' is not a layout"),
        ({"head_num": 3}, RuntimeError, "has 4 heads in BNSD, not head_num=3"),
        ({"keep_prob": 0.0}, RuntimeError, "keep_prob=0.0 is outside (0, 1]"),
        ({"sparse_mode": 9}, RuntimeError, "sparse_mode=9 is not a mode"),
        ({"atten_mask": torch.zeros(5, 5, dtype=torch.bool)}, RuntimeError, "atten_mask of shape"),
    ],
    ids=["prefix-mode", "tnd", "varlen", "layout", "heads", "keep-prob", "mode", "mask-shape"],
)
def test_fusion_attention_refuses_in_one_line_naming_the_argument(kwargs, error, says):
    q = randn(B, N, S, D)
    arguments = {"head_num": N, "input_layout": "BNSD", **kwargs}
    with pytest.raises(error) as raised:
        npu_fusion_attention(q, q, q, **arguments)
    message = str(raised.value)
    assert message.startswith("torch_npu.npu_fusion_attention: ") and says in message, message
    assert "\n" not in message


# -- npu_rotary_mul -------------------------------------------------------------------------------


def rotate_half(x):
    """LLaMA's rotate_half: [-x2, x1] of the two halves."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def cos_sin(length, dim, interleaved):
    """The cos and sin tables of rotary embedding, [1, S, 1, D]; each frequency repeated
    for both halves, or for both members of a pair (interleaved)."""
    inverse = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    angles = torch.outer(torch.arange(length, dtype=torch.float64), inverse)
    angles = angles.repeat_interleave(2, -1) if interleaved else torch.cat([angles] * 2, -1)
    return angles.cos()[None, :, None], angles.sin()[None, :, None]


def test_rotary_mul_half_is_llamas_rotate_half_embedding():
    x = randn(2, 5, 3, 16)  # BSND
    cos, sin = cos_sin(5, 16, interleaved=False)
    out = npu_rotary_mul(x, cos.float(), sin.float())
    torch.testing.assert_close(out, (x.double() * cos + rotate_half(x.double()) * sin).float())


def test_rotary_mul_interleave_rotates_each_pair_as_a_complex_number():
    x = randn(2, 3, 5, 16)  # BNSD
    cos, sin = (t.transpose(1, 2) for t in cos_sin(5, 16, interleaved=True))
    out = npu_rotary_mul(x, cos.float(), sin.float(), "interleave")
    pairs = torch.view_as_complex(x.double().reshape(2, 3, 5, 8, 2).contiguous())
    turn = torch.polar(torch.ones_like(cos[..., ::2]), torch.atan2(sin[..., ::2], cos[..., ::2]))
    want = torch.view_as_real(pairs * turn).reshape(2, 3, 5, 16)
    torch.testing.assert_close(out, want.float())


def test_rotary_mul_with_a_rotate_matrix_multiplies_by_it():
    x, r1, r2 = randn(1, 2, 5, 8), randn(1, 1, 5, 8, seed=1), randn(1, 1, 5, 8, seed=2)
    rotate = torch.zeros(8, 8)
    rotate[:4, 4:], rotate[4:, :4] = torch.eye(4), -torch.eye(4)  # the docs' 'half' matrix
    torch.testing.assert_close(npu_rotary_mul(x, r1, r2, "half", rotate), npu_rotary_mul(x, r1, r2))


def test_rotary_mul_in_bf16_and_its_gradients():
    x = randn(1, 4, 2, 8, dtype=torch.bfloat16)
    cos, sin = (t.to(torch.bfloat16) for t in cos_sin(4, 8, interleaved=False))
    out = npu_rotary_mul(x, cos, sin)
    assert out.dtype == torch.bfloat16
    want = x.double() * cos.double() + rotate_half(x.double()) * sin.double()
    torch.testing.assert_close(out.float(), want.float(), **BF16)
    for mode in ("half", "interleave"):
        gradcheck(
            lambda x, r1, r2, mode=mode: npu_rotary_mul(x, r1, r2, mode),
            randn(1, 2, 3, 4, dtype=torch.float64, grad=True),
            randn(1, 1, 3, 4, dtype=torch.float64, seed=1, grad=True),
            randn(1, 1, 3, 4, dtype=torch.float64, seed=2, grad=True),
        )


def test_rotary_mul_refuses_a_3d_input_and_an_unknown_mode():
    with pytest.raises(RuntimeError, match=r"input of shape \[5, 3, 16\] is not 4-D"):
        npu_rotary_mul(randn(5, 3, 16), randn(5, 1, 16), randn(5, 1, 16))
    with pytest.raises(RuntimeError, match=r"rotary_mode='quarter' is not a mode"):
        npu_rotary_mul(randn(1, 1, 2, 4), randn(1, 1, 2, 4), randn(1, 1, 2, 4), "quarter")


# -- npu_swiglu, npu_scaled_masked_softmax --------------------------------------------------------


@pytest.mark.parametrize("dim", [-1, 0])
def test_swiglu_gates_the_second_half_with_silu_of_the_first(dim):
    x = randn(4, 6, 10)
    a, b = x.double().chunk(2, dim)
    torch.testing.assert_close(npu_swiglu(x, dim=dim), (a * torch.sigmoid(a) * b).float())


def test_swiglu_in_bf16_its_gradient_and_an_odd_size():
    x = randn(3, 16, dtype=torch.bfloat16)
    a, b = x.double().chunk(2, -1)
    out = npu_swiglu(x)
    assert out.dtype == torch.bfloat16 and out.shape == (3, 8)
    torch.testing.assert_close(out.float(), (F.silu(a) * b).float(), **BF16)
    gradcheck(npu_swiglu, randn(3, 6, dtype=torch.float64, grad=True))
    with pytest.raises(RuntimeError, match=r"^torch_npu\.npu_swiglu: dim=-1 of an input of shape"):
        npu_swiglu(randn(3, 5))


def test_scaled_masked_softmax_masks_true_with_minus_10000_after_scaling():
    x = randn(2, 2, 4, 4)
    mask = randn(2, 1, 4, 4, seed=1) > 0.5
    mask[0, 0, 0] = True  # a row masked everywhere comes out uniform
    out = npu_scaled_masked_softmax(x, mask, scale=0.5)
    want = torch.softmax((x.double() * 0.5).masked_fill(mask, -10000.0), -1)
    torch.testing.assert_close(out, want.float())
    torch.testing.assert_close(out[0, :, 0], torch.full((2, 4), 0.25))


def test_scaled_masked_softmax_fixed_triu_mask_is_causal_and_bf16_keeps_bf16():
    x = randn(1, 2, 4, 4, dtype=torch.bfloat16)
    ignored = torch.ones(1, 1, 4, 4, dtype=torch.bool)
    out = npu_scaled_masked_softmax(x, ignored, 2.0, True)
    want = torch.softmax((x.double() * 2).masked_fill(torch.ones(4, 4).triu(1).bool(), -1e4), -1)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), want.float(), **BF16)


def test_scaled_masked_softmax_gradients_and_a_mask_that_does_not_fit():
    mask = torch.tensor([[False, True, False], [False, False, True]])
    gradcheck(
        lambda x: npu_scaled_masked_softmax(x, mask, 0.7),
        randn(2, 2, 3, dtype=torch.float64, grad=True),
    )
    with pytest.raises(RuntimeError, match=r"mask of shape \[3, 3\] does not broadcast to"):
        npu_scaled_masked_softmax(randn(2, 2, 3), mask.new_zeros(3, 3))


# -- npu_confusion_transpose, npu_format_cast, get_npu_format ---------------------------------


def test_confusion_transpose_follows_the_docs_examples():
    x = randn(2, 3, 4, 6, grad=True)
    first = npu_confusion_transpose(x, (0, 2, 1, 3), (2, 4, 18), True)
    torch.testing.assert_close(first, x.permute(0, 2, 1, 3).reshape(2, 4, 18))
    second = npu_confusion_transpose(x, (0, 2, 1), (2, 12, 6), False)
    assert second.shape == (2, 6, 12) and second.is_contiguous()
    torch.testing.assert_close(second, x.reshape(2, 12, 6).permute(0, 2, 1))
    second.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))
    with pytest.raises(RuntimeError, match=r"perm=\[0, 2, 1\], shape=\[2, 5, 18\] do not fit"):
        npu_confusion_transpose(x, (0, 2, 1), (2, 5, 18), False)


def test_format_cast_is_the_identity_and_formats_are_the_base_ones():
    x = randn(2, 3, 4, 5)
    assert npu_format_cast(x, 29) is x
    assert get_npu_format(npu_format_cast(x, 29)) == 0  # NCHW: no internal formats here
    assert [get_npu_format(torch.zeros([1] * rank)) for rank in (1, 2, 3, 4, 5)] == [2, 2, 2, 0, 30]
    with pytest.raises(RuntimeError, match=r"acl_format=28 is not a torch_npu\.Format value"):
        npu_format_cast(x, 28)


# -- torch.ops.npu -----------------------------------------------------------------------------


def test_register_offers_the_operators_as_torch_ops_npu():
    fused.register()
    fused.register()  # a second call changes nothing
    x, gamma = randn(2, 8, grad=True), randn(8, seed=1)
    y, rstd = torch.ops.npu.npu_rms_norm(x, gamma, 1e-5)
    torch.testing.assert_close((y, rstd), npu_rms_norm(x, gamma, 1e-5))
    y.sum().backward()
    assert x.grad is not None
    q = randn(1, 3, 2 * 4)
    results = torch.ops.npu.npu_fusion_attention(q, q, q, 2, "BSH", scale=0.5)
    assert [type(item) for item in results[4:]] == [int, int, int]
    torch.testing.assert_close(results[0], npu_fusion_attention(q, q, q, 2, "BSH", scale=0.5)[0])
    with pytest.raises(NotImplementedError, match="sink, dropout_mask, seed and offset"):
        torch.ops.npu.npu_fusion_attention(q, q, q, 2, "BSH", seed=1)

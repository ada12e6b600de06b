"""torch_npu's fused operators in a LLaMA-style block, as an Ascend team tests them on an NPU
host: each against the torch operators it replaces, every output and gradient on npu."""

import math

import torch
import torch.nn.functional as F
import torch_npu
from torch_npu.optim import NpuFusedAdamW

torch.npu.set_device("npu:0")


def npu_randn(*shape, grad=False):
    return torch.randn(*shape).npu().requires_grad_(grad)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def test_a_llama_block_with_fused_operators_matches_torch_and_trains_on_npu():
    torch.manual_seed(0)
    batch, length, heads, head_dim = 2, 16, 4, 8
    hidden = heads * head_dim
    x = npu_randn(batch, length, hidden, grad=True)
    norm_weight = torch.ones(hidden).npu().requires_grad_()
    qkv = torch.nn.Linear(hidden, 3 * hidden, bias=False).npu()
    gate_up = torch.nn.Linear(hidden, 4 * hidden, bias=False).npu()
    positions = torch.arange(length, dtype=torch.float32)
    inverse = 1.0 / 10000 ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.cat([torch.outer(positions, inverse)] * 2, dim=-1)[None, :, None]  # 1S1D
    cos, sin = angles.cos().npu(), angles.sin().npu()
    causal = torch.triu(torch.ones(2048, 2048), diagonal=1).bool().npu()

    def block(fused):
        if fused:
            h = torch_npu.npu_rms_norm(x, norm_weight, epsilon=1e-6)[0]
        else:
            h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * norm_weight
        q, k, v = qkv(h).view(batch, length, 3, heads, head_dim).unbind(2)  # BSND
        if fused:
            q, k = torch_npu.npu_rotary_mul(q, cos, sin), torch_npu.npu_rotary_mul(k, cos, sin)
            attention = torch_npu.npu_fusion_attention(
                q,
                k,
                v,
                heads,
                "BSND",
                atten_mask=causal,
                scale=1 / math.sqrt(head_dim),
                sparse_mode=2,
            )[0]
        else:
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            attention = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            ).transpose(1, 2)
        h = h + attention.reshape(batch, length, hidden)
        if fused:
            return torch_npu.npu_swiglu(gate_up(h), dim=-1)
        gate, up = gate_up(h).chunk(2, dim=-1)
        return F.silu(gate) * up

    fused = block(True)
    assert fused.device.type == "npu"
    torch.testing.assert_close(fused, block(False), atol=1e-5, rtol=1e-4)
    fused.pow(2).mean().backward()
    for tensor in (x, norm_weight, qkv.weight, gate_up.weight):
        assert tensor.grad is not None and tensor.grad.device.type == "npu"
        assert tensor.grad.abs().sum() > 0

    # Trained with torch_npu's fused AdamW towards a fixed target: the loss falls.
    parameters = [norm_weight, *qkv.parameters(), *gate_up.parameters()]
    optimizer = NpuFusedAdamW(parameters, lr=1e-2)
    target = torch.zeros_like(fused)
    losses = []
    for _ in range(5):
        optimizer.zero_grad()
        loss = (block(True) - target).pow(2).mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
    assert all(parameter.device.type == "npu" for parameter in parameters)


def test_fusion_attention_returns_its_softmax_statistics_on_npu():
    q = npu_randn(1, 8, 2 * 16)  # BSH, 2 heads of 16
    out, softmax_max, softmax_sum, softmax_out, seed, offset, numels = (
        torch_npu.npu_fusion_attention(q, q, q, 2, "BSH", scale=0.25)
    )
    assert out.shape == q.shape and out.device.type == "npu"
    assert softmax_max.shape == softmax_sum.shape == (1, 2, 8, 8)
    assert softmax_max.device.type == "npu" and softmax_max.dtype == torch.float32
    assert softmax_out.numel() == 0
    assert (seed, offset, numels) == (0, 0, 1 * 2 * 8 * 8)  # no dropout: no Philox seed


def test_megatron_style_scaled_masked_softmax_and_confusion_transpose():
    scores = npu_randn(2, 4, 32, 32, grad=True)
    padding = torch.zeros(2, 1, 32, 32, dtype=torch.bool).npu()
    padding[..., 24:] = True
    probs = torch_npu.npu_scaled_masked_softmax(scores, padding, 0.125, False)
    expected = torch.softmax((scores * 0.125).masked_fill(padding, -10000.0), dim=-1)
    torch.testing.assert_close(probs, expected)
    context = torch_npu.npu_confusion_transpose(probs @ scores, (0, 2, 1, 3), (2, 32, 128), True)
    assert context.shape == (2, 32, 128) and context.device.type == "npu"
    context.sum().backward()
    assert scores.grad.device.type == "npu"


def test_weights_cast_to_the_nz_format_keep_their_values():
    weight = npu_randn(64, 32)
    assert torch_npu.get_npu_format(weight) == 2  # ND
    cast = torch_npu.npu_format_cast(weight, 29)  # FRACTAL_NZ on an NPU
    torch.testing.assert_close(cast, weight)
    assert cast.device.type == "npu"


def test_code_that_calls_torch_ops_npu_gets_the_same_operator():
    x, gamma = npu_randn(4, 16, grad=True), npu_randn(16)
    y, rstd = torch.ops.npu.npu_rms_norm(x, gamma, 1e-5)
    torch.testing.assert_close((y, rstd), torch_npu.npu_rms_norm(x, gamma, epsilon=1e-5))
    y.sum().backward()
    assert x.grad.device.type == "npu"

"""torch_npu.optim's fused optimizers on the stand-in (devicekit/simulate/fused_optim.py) and
apex.optimizers' (ascend_apex_optim.py): each updates parameters as the matching torch
optimizer does, or, where torch has none, as the math torch-npu 2.13.0 computes, written out
again here; and what a user notices of the NPU's versions (dtypes, zero_grad, clipping).

The optimizers are device-agnostic: these run in this process on CPU tensors. Each
optimizer and its reference see the same parameters and the same gradients, step by step.
"""

import math

import pytest
import torch

from devicekit.simulate import ascend_apex_optim as apex_optim
from devicekit.simulate import fused_optim

STEPS = 6
SHAPES = [(5, 4), (3, 4, 2), (4,)]


def _parameters(dtype=torch.float32):
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(shape, generator=generator).to(dtype) for shape in SHAPES]


def _gradients(params, orthogonal=False):
    """STEPS lists of gradients for `params`; `orthogonal` makes those of matrices
    orthogonal to each parameter's rows (AdamP's projection then applies)."""
    generator = torch.Generator().manual_seed(2)
    steps = []
    for _ in range(STEPS):
        grads = [torch.randn(p.shape, generator=generator).to(p.dtype) for p in params]
        if orthogonal:
            for index, param in enumerate(params):
                if param.dim() > 1:
                    rows = param.reshape(param.size(0), -1)
                    flat = grads[index].reshape(rows.shape)
                    along = (rows * flat).sum(1, keepdim=True) / (rows * rows).sum(1, keepdim=True)
                    grads[index] = (flat - along * rows).reshape(param.shape)
        steps.append(grads)
    return steps


def _run(make, params, steps):
    """`params` (copied) after `make(copies)` stepped once per entry of `steps`."""
    copies = [torch.nn.Parameter(p.clone()) for p in params]
    optimizer = make(copies)
    for grads in steps:
        for param, grad in zip(copies, grads, strict=True):
            param.grad = grad.clone()
        optimizer.step()
    return [p.detach() for p in copies]


# The wheel's defaults are spelled out on the torch side: a wrong default would show.
TORCH_EQUIVALENTS = {
    "SGD defaults, lr given": (
        lambda p: fused_optim.NpuFusedSGD(p, lr=0.1),
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0),
    ),
    "SGD nesterov, weight decay": (
        lambda p: fused_optim.NpuFusedSGD(p, 0.05, 0.9, 0.0, 1e-3, True),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-3, nesterov=True),
    ),
    "SGD dampening": (
        lambda p: fused_optim.NpuFusedSGD(p, lr=0.05, momentum=0.8, dampening=0.3),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, dampening=0.3),
    ),
    "Adam defaults": (
        fused_optim.NpuFusedAdam,
        lambda p: torch.optim.Adam(p, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0),
    ),
    "Adam amsgrad, weight decay": (
        lambda p: fused_optim.NpuFusedAdam(p, 1e-2, (0.8, 0.99), 1e-6, 1e-2, True),
        lambda p: torch.optim.Adam(p, 1e-2, (0.8, 0.99), 1e-6, 1e-2, amsgrad=True),
    ),
    "AdamW defaults": (
        fused_optim.NpuFusedAdamW,
        lambda p: torch.optim.AdamW(p, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2),
    ),
    "AdamW amsgrad": (
        lambda p: fused_optim.NpuFusedAdamW(p, lr=1e-2, weight_decay=0.1, amsgrad=True),
        lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, amsgrad=True),
    ),
    "Adadelta defaults": (
        fused_optim.NpuFusedAdadelta,
        lambda p: torch.optim.Adadelta(p, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0),
    ),
    "Adadelta weight decay": (
        lambda p: fused_optim.NpuFusedAdadelta(p, 0.5, 0.8, 1e-5, 1e-2),
        lambda p: torch.optim.Adadelta(p, 0.5, 0.8, 1e-5, 1e-2),
    ),
    "RMSprop defaults": (
        fused_optim.NpuFusedRMSprop,
        lambda p: torch.optim.RMSprop(p, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0),
    ),
    "RMSprop centered, momentum": (
        lambda p: fused_optim.NpuFusedRMSprop(p, 1e-3, 0.9, 1e-7, 1e-2, 0.5, True),
        lambda p: torch.optim.RMSprop(p, 1e-3, 0.9, 1e-7, 1e-2, momentum=0.5, centered=True),
    ),
    "apex SGD": (
        lambda p: _stepping_without_amp(apex_optim.NpuFusedSGD(p, lr=0.1, momentum=0.9)),
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    ),
    "apex AdamW defaults": (
        lambda p: _stepping_without_amp(apex_optim.NpuFusedAdamW(p)),
        lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=1e-2),
    ),
}


def _stepping_without_amp(optimizer):
    """An apex fused optimizer marked as amp.initialize marks it (its step needs that)."""
    optimizer._amp_stash = None
    return optimizer


@pytest.mark.parametrize("case", sorted(TORCH_EQUIVALENTS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_fused_optimizer_updates_bitwise_as_its_torch_optimizer(case, dtype):
    fused, reference = TORCH_EQUIVALENTS[case]
    params = _parameters(dtype)
    steps = _gradients(params)
    expected = _run(reference, params, steps)
    for got, want in zip(_run(fused, params, steps), expected, strict=True):
        assert torch.equal(got, want), case
    assert not torch.equal(expected[0], params[0]), "the parameters moved"


# -- the rules torch has no optimizer for, against the math written out --------------------


def _lamb(params, steps, lr, betas, eps, weight_decay, adam=False, global_norm=False):
    params = [p.clone() for p in params]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    for grads in steps:
        if global_norm:
            norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
            grads = [g / norm for g in grads] if norm > 1 else grads
        for i, (p, g) in enumerate(zip(params, grads, strict=True)):
            m[i] = betas[0] * m[i] + (1 - betas[0]) * g
            v[i] = betas[1] * v[i] + (1 - betas[1]) * g * g
            update = m[i] / (v[i].sqrt() + eps) + weight_decay * p
            weight_norm, update_norm = min(float(p.norm()), 10.0), float(update.norm())
            ratio = (
                1.0 if adam or weight_norm == 0 or update_norm == 0 else weight_norm / update_norm
            )
            params[i] = p - lr * ratio * update
    return params


def _schedule(name, x, warmup):
    if x < warmup:
        return x / warmup
    return {
        "warmup_linear": max((x - 1.0) / (warmup - 1.0), 0.0),
        "warmup_cosine": 0.5 * (1.0 + math.cos(math.pi * x)),
        "warmup_constant": 1.0,
        "warmup_poly": (1.0 - x) ** 0.5,
    }[name]


def _bert_adam(
    params, steps, lr, b1, b2, e, wd, max_norm, clip, t_total=-1, warmup=-1, schedule=""
):
    """`clip`: "each" (torch_npu: each dtype's gradients to max_norm) or "global" (apex:
    all gradients divided by their norm when it exceeds 1)."""
    params = [p.clone() for p in params]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    for step, grads in enumerate(steps):
        norm = math.sqrt(sum(float((g.float() * g.float()).sum()) for g in grads))
        if clip == "each" and max_norm > 0 and max_norm / (norm + 1e-6) < 1:
            grads = [g * (max_norm / (norm + 1e-6)) for g in grads]
        if clip == "global" and max_norm > 0 and norm > 1:
            grads = [g / norm for g in grads]
        rate = lr if t_total == -1 else lr * _schedule(schedule, step / t_total, warmup)
        for i, (p, g) in enumerate(zip(params, grads, strict=True)):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            params[i] = p - rate * (m[i] / (v[i].sqrt() + e) + wd * p)
    return params


def _rmsprop_tf(params, steps, lr, alpha, eps, wd, momentum, centered, decoupled, lr_inside):
    params = [p.clone() for p in params]
    square = [torch.ones_like(p) for p in params]  # TensorFlow starts it at 1
    mean = [torch.zeros_like(p) for p in params]
    buffer = [torch.zeros_like(p) for p in params]
    for grads in steps:
        for i, (p, g) in enumerate(zip(params, grads, strict=True)):
            if wd and decoupled:
                p = p * (1 - wd)
            elif wd:
                g = g + wd * p
            square[i] = square[i] + (1 - alpha) * (g * g - square[i])
            if centered:
                mean[i] = mean[i] + (1 - alpha) * (g - mean[i])
            rms = (square[i] - mean[i] * mean[i] + eps).sqrt()
            if momentum > 0 and lr_inside:
                buffer[i] = momentum * buffer[i] + lr * g / rms
                p = p - buffer[i]
            elif momentum > 0:
                buffer[i] = momentum * buffer[i] + g / rms
                p = p - lr * buffer[i]
            else:
                p = p - lr * g / rms
            params[i] = p
    return params


def _adamp(params, steps, lr, betas, eps, wd, delta, wd_ratio, nesterov):
    params = [p.clone() for p in params]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    for t, grads in enumerate(steps, start=1):
        for i, (p, g) in enumerate(zip(params, grads, strict=True)):
            m[i] = betas[0] * m[i] + (1 - betas[0]) * g
            v[i] = betas[1] * v[i] + (1 - betas[1]) * g * g
            denominator = v[i].sqrt() / math.sqrt(1 - betas[1] ** t) + eps
            direction = betas[0] * m[i] + (1 - betas[0]) * g if nesterov else m[i]
            step = direction / denominator
            decay = 1.0
            if p.dim() > 1:
                for rows in (p.size(0), 1):  # per output channel, then the whole tensor
                    pr, gr, sr = p.reshape(rows, -1), g.reshape(rows, -1), step.reshape(rows, -1)
                    cosine = (
                        (pr * gr).sum(1).abs() / (gr.norm(dim=1) + eps) / (pr.norm(dim=1) + eps)
                    )
                    if float(cosine.max()) < delta / math.sqrt(pr.size(1)):
                        unit = pr / (pr.norm(dim=1, keepdim=True) + eps)
                        step = (sr - unit * (unit * sr).sum(1, keepdim=True)).reshape(p.shape)
                        decay = wd_ratio
                        break
            if wd > 0:
                p = p * (1 - lr * wd * decay)
            params[i] = p - lr / (1 - betas[0] ** t) * step
    return params


RULES = {
    "Lamb defaults": (
        fused_optim.NpuFusedLamb,
        lambda p, s: _lamb(p, s, 1e-3, (0.9, 0.999), 1e-6, 0),
    ),
    "Lamb weight decay, global norm": (
        lambda p: fused_optim.NpuFusedLamb(p, 1e-2, (0.8, 0.99), 1e-6, 0.1, False, True),
        lambda p, s: _lamb(p, s, 1e-2, (0.8, 0.99), 1e-6, 0.1, global_norm=True),
    ),
    "Lamb as Adam": (
        lambda p: fused_optim.NpuFusedLamb(p, lr=1e-2, adam=True),
        lambda p, s: _lamb(p, s, 1e-2, (0.9, 0.999), 1e-6, 0, adam=True),
    ),
    "apex Lamb": (
        lambda p: apex_optim.Lamb(p, lr=1e-2, weight_decay=0.01),
        lambda p, s: _lamb(p, s, 1e-2, (0.9, 0.999), 1e-6, 0.01),
    ),
    "BertAdam, clipped to 1 by default": (
        lambda p: fused_optim.NpuFusedBertAdam(p, lr=1e-2),
        lambda p, s: _bert_adam(p, s, 1e-2, 0.9, 0.999, 1e-6, 0.01, 1.0, "each"),
    ),
    "BertAdam warmup_linear": (
        lambda p: fused_optim.NpuFusedBertAdam(p, 1e-2, 0.3, 10, "warmup_linear", max_grad_norm=-1),
        lambda p, s: _bert_adam(
            p, s, 1e-2, 0.9, 0.999, 1e-6, 0.01, -1, "each", 10, 0.3, "warmup_linear"
        ),
    ),
    "BertAdam warmup_cosine": (
        lambda p: fused_optim.NpuFusedBertAdam(p, 1e-2, 0.1, 8, "warmup_cosine", 0.8, 0.9, 1e-5, 0),
        lambda p, s: _bert_adam(
            p, s, 1e-2, 0.8, 0.9, 1e-5, 0, 1.0, "each", 8, 0.1, "warmup_cosine"
        ),
    ),
    "apex BertAdam defaults": (
        lambda p: _stepping_without_amp(apex_optim.NpuFusedBertAdam(p, lr=1e-2)),
        lambda p, s: _bert_adam(p, s, 1e-2, 0.9, 0.99, 1e-6, 0.01, -1, "global"),
    ),
    "apex BertAdam global norm": (
        lambda p: _stepping_without_amp(apex_optim.NpuFusedBertAdam(p, 1e-2, max_grad_norm=1.0)),
        lambda p, s: _bert_adam(p, s, 1e-2, 0.9, 0.99, 1e-6, 0.01, 1.0, "global"),
    ),
    "RMSpropTF defaults": (
        fused_optim.NpuFusedRMSpropTF,
        lambda p, s: _rmsprop_tf(p, s, 1e-2, 0.9, 1e-10, 0, 0, False, False, True),
    ),
    "RMSpropTF momentum, centered": (
        lambda p: fused_optim.NpuFusedRMSpropTF(p, 1e-3, 0.9, 1e-8, 1e-2, 0.9, True),
        lambda p, s: _rmsprop_tf(p, s, 1e-3, 0.9, 1e-8, 1e-2, 0.9, True, False, True),
    ),
    "RMSpropTF lr outside momentum, decoupled decay": (
        lambda p: fused_optim.NpuFusedRMSpropTF(p, 1e-3, 0.95, 1e-8, 1e-2, 0.5, False, True, False),
        lambda p, s: _rmsprop_tf(p, s, 1e-3, 0.95, 1e-8, 1e-2, 0.5, False, True, False),
    ),
    "AdamP defaults": (
        fused_optim.NpuFusedAdamP,
        lambda p, s: _adamp(p, s, 1e-3, (0.9, 0.999), 1e-8, 0, 0.1, 0.1, False),
    ),
    "AdamP nesterov, weight decay": (
        lambda p: fused_optim.NpuFusedAdamP(p, 1e-2, (0.9, 0.99), 1e-8, 0.1, 0.1, 0.5, True),
        lambda p, s: _adamp(p, s, 1e-2, (0.9, 0.99), 1e-8, 0.1, 0.1, 0.5, True),
    ),
}


@pytest.mark.parametrize("case", sorted(RULES))
@pytest.mark.parametrize("orthogonal", [False, True], ids=["random", "orthogonal"])
def test_a_rule_torch_lacks_updates_as_its_math_says(case, orthogonal):
    """float32 rounding apart (the reference orders its operations its own way):
    rtol 1e-5, atol 1e-6. Orthogonal gradients make AdamP project its step."""
    fused, reference = RULES[case]
    params = _parameters()
    steps = _gradients(params, orthogonal)
    expected = reference(params, steps)
    got = _run(fused, params, steps)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6, msg=case)
    assert not torch.equal(got[0], params[0]), "the parameters moved"


# -- what a user notices of the NPU's versions --------------------------------------------


def test_a_bfloat16_parameter_is_refused_at_the_first_step_as_on_the_npu():
    param = torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
    optimizer = fused_optim.NpuFusedAdamW([param])
    param.grad = torch.ones_like(param)
    with pytest.raises(TypeError, match=r"NpuFusedAdamW: a parameter is torch\.bfloat16, and "):
        optimizer.step()
    assert torch.equal(param, torch.ones(3, dtype=torch.bfloat16)), "nothing was updated"


def test_zero_grad_zeroes_gradients_and_refuses_set_to_none():
    param = torch.nn.Parameter(torch.ones(3))
    optimizer = fused_optim.NpuFusedSGD([param], lr=0.1)
    param.grad = torch.ones(3)
    optimizer.zero_grad()
    assert torch.equal(param.grad, torch.zeros(3)), "zeroed, not set to None"
    with pytest.raises(ValueError, match=r"zero_grad\(set_to_none=True\): torch_npu's fused"):
        optimizer.zero_grad(set_to_none=True)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf])
def test_clip_grad_norm_fused_clips_every_group_together_as_torch_clips(norm_type):
    params = [torch.nn.Parameter(p) for p in _parameters()]
    optimizer = fused_optim.NpuFusedAdam([{"params": params[:2]}, {"params": params[2:], "lr": 1}])
    grads = _gradients(params)[0]
    for param, grad in zip(params, grads, strict=True):
        param.grad = grad.clone()
    norm = optimizer.clip_grad_norm_fused_(0.5, norm_type)
    copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for copy, grad in zip(copies, grads, strict=True):
        copy.grad = grad.clone()
    expected_norm = torch.nn.utils.clip_grad_norm_(copies, 0.5, norm_type)
    torch.testing.assert_close(norm, expected_norm)
    torch.testing.assert_close([p.grad for p in params], [c.grad for c in copies])
    assert optimizer.clip_grad_norm_fused_(1e9, norm_type) == pytest.approx(0.5, rel=1e-5)


def test_sgd_has_no_default_learning_rate_unless_every_group_gives_one():
    param = torch.nn.Parameter(torch.ones(2))
    with pytest.raises(ValueError, match="NpuFusedSGD has no default learning rate: pass lr="):
        fused_optim.NpuFusedSGD([param])
    optimizer = fused_optim.NpuFusedSGD([{"params": [param], "lr": 0.5}])
    param.grad = torch.ones(2)
    optimizer.step()
    assert torch.equal(param.detach(), torch.full((2,), 0.5))
    with pytest.raises(ValueError, match="required optimization parameter lr"):
        optimizer.add_param_group({"params": [torch.nn.Parameter(torch.ones(1))]})


def test_torch_npus_optimizers_are_fused_ones_and_apexs_are_not():
    """torch_npu's share NpuFusedOptimizerBase; apex's are plain torch optimizers that
    mark themselves for amp and refuse to step before amp.initialize."""
    params = [torch.nn.Parameter(torch.ones(2))]
    for name in set(fused_optim.__all__) - {"NpuFusedOptimizerBase"}:
        assert issubclass(getattr(fused_optim, name), fused_optim.NpuFusedOptimizerBase), name
    apex_sgd = apex_optim.NpuFusedSGD(params, lr=0.1)
    assert apex_sgd.is_npu_fused_optimizer is True
    assert not isinstance(apex_sgd, fused_optim.NpuFusedOptimizerBase)
    params[0].grad = torch.ones(2)
    with pytest.raises(RuntimeError, match=r"apex.optimizers.NpuFusedSGD should be used with AMP"):
        apex_sgd.step()
    assert torch.equal(params[0].detach(), torch.ones(2)), "nothing was updated"
    apex_optim.Lamb(params).step()  # apex's plain Lamb needs no amp
    assert not torch.equal(params[0].detach(), torch.ones(2))

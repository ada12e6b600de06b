"""Update rules of Ascend's fused optimizers that torch has no optimizer for: LAMB, BERT's
Adam, TensorFlow's RMSprop and AdamP, written from the math torch-npu 2.13.0's
torch_npu/optim/npu_fused_{lamb,bert_adam,rmsprop_tf,adamp}.py compute.

Those optimizers update parameters combined into one flat buffer per dtype; here each
parameter is updated on its own, which gives the same result (the per-parameter parts,
LAMB's trust ratio and AdamP's projection, are per parameter there too). The public
classes of torch_npu.optim (fused_optim.py) and apex.optimizers (ascend_apex_optim.py) add
their constructors' defaults and checks on top.
"""

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.optim.optimizer import ParamsT, required

from devicekit.simulate import optim_common

__all__ = ["AdamP", "BertAdam", "Lamb", "RMSpropTF"]

Tensor = torch.Tensor


class Lamb(optim_common.GroupByGroup):
    """LAMB without bias correction: Adam's step m / (sqrt(v) + eps), plus weight_decay * p,
    scaled per parameter by the trust ratio ||p|| (clamped to [0, 10]) / ||step|| (1 where
    either norm is 0, or always with `adam=True`). With `use_global_grad_norm`, gradients are
    first divided by the norm of all of them together when that exceeds 1."""

    def __init__(
        self,
        params: ParamsT,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        adam: bool,
        use_global_grad_norm: bool,
    ) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        for index, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {index}: {beta}")
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        self.adam = adam
        self.use_global_grad_norm = use_global_grad_norm
        self._divisor: Tensor | None = None
        super().__init__(params, defaults)

    def _prepare(self) -> None:
        norm = optim_common.global_grad_norm(self) if self.use_global_grad_norm else None
        self._divisor = norm if norm is not None and norm > 1 else None

    def _update_group(self, group: dict[str, Any]) -> None:
        beta1, beta2 = group["betas"]
        for param, grad in optim_common.with_grads(group):
            if self._divisor is not None:
                grad = grad / self._divisor
            exp_avg, exp_avg_sq = optim_common.adam_moments(self.state[param], param)
            exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            adam_step = exp_avg / exp_avg_sq.sqrt().add(group["eps"])
            if group["weight_decay"] != 0:
                adam_step.add_(param, alpha=group["weight_decay"])
            if not self.adam:
                weight_norm = param.float().pow(2).sum().sqrt().clamp(0, 10)
                step_norm = adam_step.float().pow(2).sum().sqrt()
                either_zero = (weight_norm == 0) | (step_norm == 0)
                trust = torch.where(either_zero, 1.0, weight_norm / step_norm)
                adam_step.mul_(trust.to(adam_step.dtype))
            param.add_(adam_step, alpha=-group["lr"])


def _warmup_cosine(x: float, warmup: float) -> float:
    return x / warmup if x < warmup else 0.5 * (1.0 + math.cos(math.pi * x))


def _warmup_constant(x: float, warmup: float) -> float:
    return x / warmup if x < warmup else 1.0


def _warmup_linear(x: float, warmup: float) -> float:
    return x / warmup if x < warmup else max((x - 1.0) / (warmup - 1.0), 0.0)


def _warmup_poly(x: float, warmup: float) -> float:
    return x / warmup if x < warmup else (1.0 - x) ** 0.5


_SCHEDULES: dict[str, Callable[[float, float], float]] = {
    "warmup_cosine": _warmup_cosine,
    "warmup_constant": _warmup_constant,
    "warmup_linear": _warmup_linear,
    "warmup_poly": _warmup_poly,
}


class BertAdam(optim_common.GroupByGroup):
    """BERT's Adam: no bias correction, update m / (sqrt(v) + e) plus weight_decay * p,
    learning rate lr * schedule(step / t_total, warmup) when t_total is not -1. Gradients
    are clipped first: each group's float32 and float16 gradients each to a norm of
    `max_grad_norm` when that is positive (torch_npu's; apex's rule overrides
    `_clip_gradients`)."""

    def __init__(
        self,
        params: ParamsT,
        lr: Any,
        warmup: float,
        t_total: int,
        schedule: str,
        b1: float,
        b2: float,
        e: float,
        weight_decay: float,
        max_grad_norm: float,
    ) -> None:
        if lr is not required and lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if (warmup < 0.0 and warmup != -1) or warmup >= 1.0:
            raise ValueError(
                f"Invalid warmup: {warmup}: give a fraction of t_total in [0, 1), or -1"
            )
        if schedule not in _SCHEDULES:
            raise ValueError(
                f"Invalid schedule parameter: {schedule!r}: one of {', '.join(_SCHEDULES)}"
            )
        for name, beta in (("b1", b1), ("b2", b2)):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid {name} parameter: {beta}")
        if e < 0.0:
            raise ValueError(f"Invalid epsilon value: {e}")
        defaults = dict(
            lr=lr,
            schedule=schedule,
            warmup=warmup,
            t_total=t_total,
            b1=b1,
            b2=b2,
            e=e,
            weight_decay=weight_decay,
            max_grad_norm=max_grad_norm,
        )
        self.max_grad_norm = max_grad_norm
        super().__init__(params, defaults)

    def _prepare(self) -> None:
        self._clip_gradients()

    def _clip_gradients(self) -> None:
        if self.max_grad_norm <= 0:
            return
        for group in self.param_groups:
            for dtype in (torch.float32, torch.float16):
                grads = [grad for p, grad in optim_common.with_grads(group) if p.dtype == dtype]
                optim_common.clip_together(grads, self.max_grad_norm)

    def _update_group(self, group: dict[str, Any]) -> None:
        beta1, beta2 = group["b1"], group["b2"]
        for param, grad in optim_common.with_grads(group):
            state = self.state[param]
            exp_avg, exp_avg_sq = optim_common.adam_moments(state, param)
            exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            update = exp_avg / (exp_avg_sq.sqrt() + group["e"])
            if group["weight_decay"] > 0.0:
                update.add_(param, alpha=group["weight_decay"])
            lr = group["lr"]
            if group["t_total"] != -1:
                progress = (state["step"] - 1) / group["t_total"]  # steps taken before this one
                lr = lr * _SCHEDULES[group["schedule"]](progress, group["warmup"])
            param.add_(update, alpha=-lr)


class RMSpropTF(optim_common.GroupByGroup):
    """RMSprop in TensorFlow's order: the mean square starts at 1 and eps goes inside the
    square root; with momentum, the learning rate is folded into the momentum buffer
    (`lr_in_momentum`); `decoupled_decay` scales p by 1 - weight_decay instead of adding
    weight_decay * p to the gradient."""

    def __init__(
        self,
        params: ParamsT,
        lr: float,
        alpha: float,
        eps: float,
        weight_decay: float,
        momentum: float,
        centered: bool,
        decoupled_decay: bool,
        lr_in_momentum: bool,
    ) -> None:
        for name, value in (
            ("learning rate", lr),
            ("epsilon value", eps),
            ("momentum value", momentum),
            ("weight_decay value", weight_decay),
            ("alpha value", alpha),
        ):
            if value < 0.0:
                raise ValueError(f"Invalid {name}: {value}")
        defaults = dict(
            lr=lr,
            momentum=momentum,
            alpha=alpha,
            eps=eps,
            centered=centered,
            weight_decay=weight_decay,
            decoupled_decay=decoupled_decay,
            lr_in_momentum=lr_in_momentum,
        )
        super().__init__(params, defaults)

    def _update_group(self, group: dict[str, Any]) -> None:
        lr, momentum, eps = group["lr"], group["momentum"], group["eps"]
        weight_decay, rate = group["weight_decay"], 1.0 - group["alpha"]
        for param, grad in optim_common.with_grads(group):
            if grad.is_sparse:
                raise RuntimeError("RMSpropTF does not support sparse gradients")
            state = self.state[param]
            if len(state) == 0:
                state["step"] = 0
                state["square_avg"] = torch.ones_like(param, memory_format=torch.preserve_format)
                if momentum > 0:
                    state["momentum_buffer"] = torch.zeros_like(param)
                if group["centered"]:
                    state["grad_avg"] = torch.zeros_like(param)
            state["step"] += 1
            if weight_decay != 0:
                if group["decoupled_decay"]:
                    param.mul_(1.0 - weight_decay)
                else:
                    grad = grad.add(param, alpha=weight_decay)
            square_avg = state["square_avg"]
            square_avg.add_(grad.pow(2) - square_avg, alpha=rate)
            if group["centered"]:
                grad_avg = state["grad_avg"]
                grad_avg.add_(grad - grad_avg, alpha=rate)
                avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).add_(eps).sqrt_()
            else:
                avg = square_avg.add(eps).sqrt_()
            if momentum > 0:
                buffer = state["momentum_buffer"]
                if group["lr_in_momentum"]:
                    buffer.mul_(momentum).addcdiv_(grad, avg, value=lr)
                    param.sub_(buffer)
                else:
                    buffer.mul_(momentum).addcdiv_(grad, avg)
                    param.add_(buffer, alpha=-lr)
            else:
                param.addcdiv_(grad, avg, value=-lr)


def _rows(x: Tensor) -> Tensor:
    return x.reshape(x.size(0), -1)


def _whole(x: Tensor) -> Tensor:
    return x.reshape(1, -1)


class AdamP(optim_common.GroupByGroup):
    """AdamP: Adam (bias-corrected, optionally Nesterov) whose step loses its component
    along a matrix parameter (per output channel, else as a whole) when the gradient is
    nearly orthogonal to it (|cosine| below delta / sqrt(fan-in)); such a parameter's
    decoupled weight decay is then scaled by wd_ratio."""

    def __init__(
        self,
        params: ParamsT,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        delta: float,
        wd_ratio: float,
        nesterov: bool,
    ) -> None:
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            delta=delta,
            wd_ratio=wd_ratio,
            nesterov=nesterov,
        )
        super().__init__(params, defaults)

    def _update_group(self, group: dict[str, Any]) -> None:
        beta1, beta2 = group["betas"]
        lr, eps = group["lr"], group["eps"]
        for param, grad in optim_common.with_grads(group):
            state = self.state[param]
            exp_avg, exp_avg_sq = optim_common.adam_moments(state, param)
            exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denominator = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** state["step"])).add_(eps)
            step_size = lr / (1 - beta1 ** state["step"])
            if group["nesterov"]:
                perturb = (beta1 * exp_avg + (1 - beta1) * grad) / denominator
            else:
                perturb = exp_avg / denominator
            decay = 1.0
            if param.dim() > 1:
                perturb, decay = _project(
                    param, grad, perturb, group["delta"], group["wd_ratio"], eps
                )
            if group["weight_decay"] > 0:
                param.mul_(1 - lr * group["weight_decay"] * decay)
            param.add_(perturb, alpha=-step_size)


def _project(
    param: Tensor, grad: Tensor, perturb: Tensor, delta: float, wd_ratio: float, eps: float
) -> tuple[Tensor, float]:
    """AdamP's projection of `perturb` off `param`, and the weight decay ratio it implies."""
    expand = [-1] + [1] * (param.dim() - 1)
    for view in (_rows, _whole):
        flat_grad, flat_param = view(grad), view(param)
        cosine = (flat_grad * flat_param).sum(dim=1).abs()
        cosine = cosine / flat_grad.norm(dim=1).add(eps) / flat_param.norm(dim=1).add(eps)
        if cosine.max() < delta / math.sqrt(flat_param.size(1)):
            unit = param / flat_param.norm(dim=1).view(expand).add(eps)
            perturb = perturb - unit * view(unit * perturb).sum(dim=1).view(expand)
            return perturb, wd_ratio
    return perturb, 1.0

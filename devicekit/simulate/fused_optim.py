"""`torch_npu.optim` of the stand-in: torch-npu 2.13.0's fused optimizers, with their
constructors and defaults, computing what the matching torch optimizer computes.

On an NPU they update parameters combined into one flat buffer per dtype; here SGD, Adam,
AdamW, Adadelta and RMSprop are torch's own optimizers, and the rules torch lacks (LAMB,
BERT's Adam, TensorFlow's RMSprop, AdamP) come from optim_rules.py. What a user can notice
of the NPU's versions is kept: parameters must be float32 or float16, zero_grad() zeroes
gradients and refuses set_to_none=True, and clip_grad_norm_fused_ clips all of them as one.
"""

from typing import Any

import torch
from torch.optim.optimizer import Optimizer, ParamsT, required

from devicekit.simulate import optim_common, optim_rules

__all__ = [
    "NpuFusedAdadelta",
    "NpuFusedAdam",
    "NpuFusedAdamP",
    "NpuFusedAdamW",
    "NpuFusedBertAdam",
    "NpuFusedLamb",
    "NpuFusedOptimizerBase",
    "NpuFusedRMSprop",
    "NpuFusedRMSpropTF",
    "NpuFusedSGD",
]

# NpuFusedSGD's defaults, under the names its signature gives them in the wheel.
MOMENTUM_MIN = 0.0
DAMPENING_DEFAULT = 0.0
WEIGHT_DECAY_MIN = 0.0

_FUSED_DTYPES = (torch.float32, torch.float16)


def _float32_or_float16_only(optimizer: Optimizer, args: Any, kwargs: Any) -> None:
    """Step pre-hook: the NPU's fused optimizers combine float32 and float16 parameters
    only, and refuse any other dtype at their first step."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param.grad is not None and param.dtype not in _FUSED_DTYPES:
                name = type(optimizer).__name__
                raise TypeError(
                    f"{name}: a parameter is {param.dtype}, and torch_npu's fused optimizers "
                    "take float32 or float16 parameters only: keep the parameters in float32 "
                    "(autocast computes in lower precision), or use a torch.optim optimizer"
                )


def _as_fused(optimizer: Optimizer) -> None:
    optimizer.register_step_pre_hook(_float32_or_float16_only)


class NpuFusedOptimizerBase(Optimizer):
    """What torch_npu's fused optimizers share: gradients zeroed, never set to None, and
    clipped all together."""

    def __init__(self, params: ParamsT, default: dict[str, Any]) -> None:
        super().__init__(params, default)
        _as_fused(self)

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zero every gradient in place; set_to_none=True is refused, as on the NPU."""
        if set_to_none:
            raise ValueError(
                f"{type(self).__name__}.zero_grad(set_to_none=True): torch_npu's fused "
                "optimizers keep their gradients; call zero_grad() to zero them"
            )
        super().zero_grad(set_to_none=False)

    def clip_grad_norm_fused_(self, max_norm: float, norm_type: float = 2) -> torch.Tensor:
        """Clip the gradients of all parameter groups together to `max_norm`; their norm
        before clipping."""
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        return optim_common.clip_together(grads, max_norm, norm_type)


class NpuFusedSGD(NpuFusedOptimizerBase, torch.optim.SGD):
    """torch.optim.SGD (momentum, dampening, L2 weight decay, Nesterov)."""

    def __init__(
        self,
        params: ParamsT,
        lr: Any = required,
        momentum: float = MOMENTUM_MIN,
        dampening: float = DAMPENING_DEFAULT,
        weight_decay: float = WEIGHT_DECAY_MIN,
        nesterov: bool = False,
    ) -> None:
        params, first_lr = optim_common.lr_or_groups(params, lr, "NpuFusedSGD")
        torch.optim.SGD.__init__(
            self,
            params,
            lr=first_lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
        )
        if lr is required:  # a group added later without its lr is refused, as in the wheel
            self.defaults["lr"] = required
        _as_fused(self)


class NpuFusedAdam(NpuFusedOptimizerBase, torch.optim.Adam):
    """torch.optim.Adam (L2 weight decay, AMSGrad)."""

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
    ) -> None:
        torch.optim.Adam.__init__(
            self, params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad
        )
        _as_fused(self)


class NpuFusedAdamW(NpuFusedOptimizerBase, torch.optim.AdamW):
    """torch.optim.AdamW (decoupled weight decay, AMSGrad)."""

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
    ) -> None:
        torch.optim.AdamW.__init__(
            self, params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad
        )
        _as_fused(self)


class NpuFusedAdadelta(NpuFusedOptimizerBase, torch.optim.Adadelta):
    """torch.optim.Adadelta."""

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0,
    ) -> None:
        torch.optim.Adadelta.__init__(
            self, params, lr=lr, rho=rho, eps=eps, weight_decay=weight_decay
        )
        _as_fused(self)


class NpuFusedRMSprop(NpuFusedOptimizerBase, torch.optim.RMSprop):
    """torch.optim.RMSprop (momentum, centered)."""

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum: float = 0,
        centered: bool = False,
    ) -> None:
        torch.optim.RMSprop.__init__(
            self,
            params,
            lr=lr,
            alpha=alpha,
            eps=eps,
            weight_decay=weight_decay,
            momentum=momentum,
            centered=centered,
        )
        _as_fused(self)


class NpuFusedLamb(NpuFusedOptimizerBase, optim_rules.Lamb):
    """LAMB (optim_rules.Lamb)."""

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0,
        adam: bool = False,
        use_global_grad_norm: bool = False,
    ) -> None:
        optim_rules.Lamb.__init__(
            self, params, lr, betas, eps, weight_decay, adam, use_global_grad_norm
        )
        _as_fused(self)


class NpuFusedBertAdam(NpuFusedOptimizerBase, optim_rules.BertAdam):
    """BERT's Adam (optim_rules.BertAdam), gradients clipped per group to max_grad_norm."""

    def __init__(
        self,
        params: ParamsT,
        lr: Any = required,
        warmup: float = -1,
        t_total: int = -1,
        schedule: str = "warmup_linear",
        b1: float = 0.9,
        b2: float = 0.999,
        e: float = 1e-6,
        weight_decay: float = 0.01,
        max_grad_norm: float = 1.0,
    ) -> None:
        optim_rules.BertAdam.__init__(
            self, params, lr, warmup, t_total, schedule, b1, b2, e, weight_decay, max_grad_norm
        )
        _as_fused(self)


class NpuFusedRMSpropTF(NpuFusedOptimizerBase, optim_rules.RMSpropTF):
    """RMSprop in TensorFlow's order (optim_rules.RMSpropTF)."""

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-2,
        alpha: float = 0.9,
        eps: float = 1e-10,
        weight_decay: float = 0,
        momentum: float = 0.0,
        centered: bool = False,
        decoupled_decay: bool = False,
        lr_in_momentum: bool = True,
    ) -> None:
        optim_rules.RMSpropTF.__init__(
            self,
            params,
            lr,
            alpha,
            eps,
            weight_decay,
            momentum,
            centered,
            decoupled_decay,
            lr_in_momentum,
        )
        _as_fused(self)


class NpuFusedAdamP(NpuFusedOptimizerBase, optim_rules.AdamP):
    """AdamP (optim_rules.AdamP)."""

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        delta: float = 0.1,
        wd_ratio: float = 0.1,
        nesterov: bool = False,
    ) -> None:
        optim_rules.AdamP.__init__(
            self, params, lr, betas, eps, weight_decay, delta, wd_ratio, nesterov
        )
        _as_fused(self)

"""`apex.optimizers` of Ascend's fork of apex on the stand-in: the NPU fused optimizers
(src/apex/optimizers/npu_fused_*.py and lamb.py of gitee.com/ascend/apex), with their
constructors and defaults, computing what torch's optimizers or optim_rules.py compute.

Unlike torch_npu.optim's, apex's fused optimizers refuse to step until amp.initialize has
taken them (apex keeps their combined tensors in amp's state), and mark themselves with
`is_npu_fused_optimizer`, which makes amp.initialize zero gradients in place. apex's
NpuFusedBertAdam has other defaults than torch_npu's (b2=0.99, max_grad_norm=-1) and,
with max_grad_norm > 0, divides all gradients by their joint norm when it exceeds 1.
"""

import math
from typing import Any

import torch
from torch.optim.optimizer import Optimizer, ParamsT, required

from devicekit.simulate import optim_common, optim_rules

__all__ = [
    "Lamb",
    "NpuFusedAdadelta",
    "NpuFusedAdam",
    "NpuFusedAdamP",
    "NpuFusedAdamW",
    "NpuFusedBertAdam",
    "NpuFusedLamb",
    "NpuFusedRMSprop",
    "NpuFusedRMSpropTF",
    "NpuFusedSGD",
]

# NpuFusedSGD's defaults, under the names its signature gives them.
MOMENTUM_MIN = 0.0
DAMPENING_DEFAULT = 0.0
WEIGHT_DECAY_MIN = 0.0


def _after_amp_initialize(optimizer: Optimizer, args: Any, kwargs: Any) -> None:
    """Step pre-hook: apex's fused optimizers step only once amp.initialize took them."""
    if not hasattr(optimizer, "_amp_stash"):
        name = type(optimizer).__name__
        raise RuntimeError(
            f"apex.optimizers.{name} should be used with AMP: pass it to "
            "amp.initialize(model, optimizer, opt_level='O1' or 'O2') before stepping"
        )


def _as_apex_fused(optimizer: Optimizer) -> None:
    optimizer.is_npu_fused_optimizer = True  # type: ignore[attr-defined]
    optimizer.register_step_pre_hook(_after_amp_initialize)


class NpuFusedSGD(torch.optim.SGD):
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
        super().__init__(
            params,
            lr=first_lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
        )
        if lr is required:  # a group added later without its lr is refused
            self.defaults["lr"] = required
        _as_apex_fused(self)


class NpuFusedAdam(torch.optim.Adam):
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
        super().__init__(
            params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad
        )
        _as_apex_fused(self)


class NpuFusedAdamW(torch.optim.AdamW):
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
        super().__init__(
            params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad
        )
        _as_apex_fused(self)


class NpuFusedAdadelta(torch.optim.Adadelta):
    """torch.optim.Adadelta."""

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0,
    ) -> None:
        super().__init__(params, lr=lr, rho=rho, eps=eps, weight_decay=weight_decay)
        _as_apex_fused(self)


class NpuFusedRMSprop(torch.optim.RMSprop):
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
        super().__init__(
            params,
            lr=lr,
            alpha=alpha,
            eps=eps,
            weight_decay=weight_decay,
            momentum=momentum,
            centered=centered,
        )
        _as_apex_fused(self)


class NpuFusedLamb(optim_rules.Lamb):
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
        super().__init__(params, lr, betas, eps, weight_decay, adam, use_global_grad_norm)
        _as_apex_fused(self)


class Lamb(optim_rules.Lamb):
    """apex's plain LAMB: NpuFusedLamb's rule without the global gradient norm, a torch
    optimizer like any other (no amp.initialize needed)."""

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0,
        adam: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, adam, False)


class NpuFusedBertAdam(optim_rules.BertAdam):
    """BERT's Adam (optim_rules.BertAdam), with apex's defaults and clipping."""

    def __init__(
        self,
        params: ParamsT,
        lr: Any = required,
        warmup: float = -1,
        t_total: int = -1,
        schedule: str = "warmup_linear",
        b1: float = 0.9,
        b2: float = 0.99,
        e: float = 1e-6,
        weight_decay: float = 0.01,
        max_grad_norm: float = -1,
    ) -> None:
        super().__init__(
            params, lr, warmup, t_total, schedule, b1, b2, e, weight_decay, max_grad_norm
        )
        _as_apex_fused(self)

    def _clip_gradients(self) -> None:
        if self.max_grad_norm <= 0:
            return
        norm = optim_common.global_grad_norm(self)
        if not math.isfinite(norm) or norm <= 1:
            return
        for group in self.param_groups:
            if group["max_grad_norm"] > 0:
                for param in group["params"]:
                    if param.grad is not None:
                        param.grad.div_(norm.to(param.grad.device))


class NpuFusedRMSpropTF(optim_rules.RMSpropTF):
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
        super().__init__(
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
        _as_apex_fused(self)


class NpuFusedAdamP(optim_rules.AdamP):
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
        super().__init__(params, lr, betas, eps, weight_decay, delta, wd_ratio, nesterov)
        _as_apex_fused(self)

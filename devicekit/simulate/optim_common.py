"""What the stand-in's fused optimizers (fused_optim.py, optim_rules.py,
ascend_apex_optim.py) share: all gradients clipped as one, their joint norm, SGD's missing
default learning rate, and a step that updates parameter group by parameter group."""

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.optim.optimizer import Optimizer, ParamsT, required

__all__ = [
    "GroupByGroup",
    "adam_moments",
    "clip_together",
    "global_grad_norm",
    "lr_or_groups",
    "with_grads",
]

Tensor = torch.Tensor


def clip_together(grads: list[Tensor], max_norm: float, norm_type: float = 2.0) -> Tensor:
    """Scale `grads` in place so that their joint `norm_type` norm, taken in float32, is at
    most `max_norm` (as torch_npu's fused clipping does: by max_norm / (norm + 1e-6) when
    that is below 1); the norm before clipping, a 0-d float32 tensor (0 without grads)."""
    if not grads:
        return torch.tensor(0.0)
    device = grads[0].device
    norm_type = float(norm_type)
    if norm_type == math.inf:
        total = torch.stack([g.detach().float().abs().max().to(device) for g in grads]).max()
    else:
        powers = [g.detach().float().abs().pow(norm_type).sum().to(device) for g in grads]
        total = torch.stack(powers).sum().pow(1.0 / norm_type)
    coefficient = float(max_norm) / (total + 1e-6)
    if coefficient < 1:
        for grad in grads:
            grad.mul_(coefficient.to(grad.device))
    return total


def global_grad_norm(optimizer: Optimizer) -> Tensor:
    """The L2 norm, in float32, of every gradient of `optimizer`'s parameters together."""
    grads = [
        p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None
    ]
    if not grads:
        return torch.tensor(0.0)
    device = grads[0].device
    return torch.stack([g.float().pow(2).sum().to(device) for g in grads]).sum().sqrt()


def lr_or_groups(params: ParamsT, lr: Any, name: str) -> tuple[ParamsT, float]:
    """Ascend's SGD has no default learning rate (lr=required): without `lr`, every
    parameter group gives its own. (params, the lr to give torch's SGD for its default)."""
    if lr is not required:
        return params, lr
    given = list(params)
    groups = [group for group in given if isinstance(group, dict) and "lr" in group]
    if not groups or len(groups) != len(given):
        raise ValueError(
            f"{name} has no default learning rate: pass lr=..., or an 'lr' in every parameter group"
        )
    return groups, 0.0


def with_grads(group: dict[str, Any]) -> list[tuple[Tensor, Tensor]]:
    """(parameter, its gradient) for each parameter of `group` that has one."""
    return [(p, p.grad) for p in group["params"] if p.grad is not None]


class GroupByGroup(Optimizer):
    """step(): the closure (with gradients on), then `_prepare` and `_update_group` for each
    parameter group, without gradients."""

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._prepare()
        for group in self.param_groups:
            self._update_group(group)
        return loss

    def _prepare(self) -> None:
        """What a step does once before the groups' updates (nothing here)."""

    def _update_group(self, group: dict[str, Any]) -> None:
        raise NotImplementedError


def adam_moments(state: dict[str, Any], param: Tensor) -> tuple[Tensor, Tensor]:
    """exp_avg and exp_avg_sq of `param` (zero on its first step), its step counted."""
    if len(state) == 0:
        state["step"] = 0
        state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
    state["step"] += 1
    return state["exp_avg"], state["exp_avg_sq"]

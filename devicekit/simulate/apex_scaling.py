"""Loss scaling and optimizer patches of the stand-in's apex.amp (ascend_apex.py), after
Ascend's apex (NVIDIA apex's amp/scaler.py, _process_optimizer.py and handle.py with
Ascend's patch/npu.patch): what happens at each `amp.scale_loss` exit and in a step.

At each scale_loss exit the new gradients are unscaled (added to those kept from earlier
backward passes of the same step) and, with a dynamic loss scale only, checked for inf and
NaN: an overflow lowers the scale and makes the next optimizer.step() a no-op; a fixed
scale is never checked, as in apex. With master weights (O2) the model's float16 gradients
are copied into float32 master gradients, the optimizer updates the masters, and the step
copies them back into the model.
"""

import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from devicekit.simulate import optim_common

__all__ = [
    "LossScaler",
    "Stash",
    "float32_masters",
    "patch_optimizer",
    "post_backward",
    "prepare_backward",
]

Tensor = torch.Tensor


class LossScaler:
    """One loss's scale: fixed, or "dynamic" (multiplied by `backoff_factor` on an
    overflow, by `growth_factor` after `window` steps without one, within [min, max])."""

    def __init__(
        self,
        loss_scale: float | str,
        init_scale: float,
        growth_factor: float,
        backoff_factor: float,
        window: int,
        min_scale: float | None,
        max_scale: float,
    ) -> None:
        self.dynamic = loss_scale == "dynamic"
        self.scale = min(max_scale, init_scale) if self.dynamic else float(loss_scale)
        self.unskipped = 0
        self._growth_factor = growth_factor
        self._backoff_factor = backoff_factor
        self._window = window
        self._min_scale = min_scale
        self._max_scale = max_scale

    def update(self, overflow: bool) -> bool:
        """Count a backward pass; whether its step must be skipped (an overflow, dynamic)."""
        skip = overflow and self.dynamic
        if skip:
            self.scale *= self._backoff_factor
            if self._min_scale:
                self.scale = max(self._min_scale, self.scale)
            self.unskipped = 0
        else:
            self.unskipped += 1
        if self.dynamic and self.unskipped == self._window:
            self.scale = min(self._max_scale, self.scale * self._growth_factor)
            self.unskipped = 0
        return skip


@dataclass
class Stash:
    """What amp keeps on an optimizer (as `optimizer._amp_stash`, apex's name)."""

    masters: list[tuple[Tensor, Tensor]]  # (the model's float16 parameter, its float32 master)
    autocast_device: str | None  # O1's autocast, switched off during step()
    say: Callable[[str], None]
    kept: list[Tensor | None] = field(default_factory=list)  # grads of earlier passes
    scaled: bool = False  # a scale_loss with delay_unscale=True left scaled gradients
    skip: str | None = None  # the overflow message of a step to skip

    def masters_of(self) -> set[Tensor]:
        return {master for _, master in self.masters}


def _own_params(optimizer: torch.optim.Optimizer) -> Iterator[Tensor]:
    """The optimizer's parameters that are the model's own (not float32 masters)."""
    masters = optimizer._amp_stash.masters_of()  # type: ignore[attr-defined]
    for group in optimizer.param_groups:
        yield from (p for p in group["params"] if p not in masters)


def prepare_backward(optimizer: torch.optim.Optimizer) -> None:
    """Before a backward pass: keep the gradients of earlier passes aside."""
    stash: Stash = optimizer._amp_stash  # type: ignore[attr-defined]
    if stash.scaled:
        return
    own = list(_own_params(optimizer))
    stash.kept = [p.grad for p in own]
    for param in own:
        param.grad = None
    for model_param, _ in stash.masters:
        model_param.grad = None


def post_backward(optimizer: torch.optim.Optimizer, scale: float, check: bool, ddp: bool) -> bool:
    """After a backward pass: average the new gradients over the ranks (`ddp`, apex's
    combine_ddp), unscale them into the gradients the optimizer reads; whether any is inf
    or NaN (looked at only when `check`)."""
    stash: Stash = optimizer._amp_stash  # type: ignore[attr-defined]
    inverse = 1.0 / scale
    own = list(_own_params(optimizer))
    kept = stash.kept if len(stash.kept) == len(own) else [None] * len(own)
    if ddp:
        for param in [*own, *(p for p, _ in stash.masters)]:
            if param.grad is not None:
                dist.all_reduce(param.grad)
                param.grad.div_(dist.get_world_size())
    results = []
    for param, earlier in zip(own, kept, strict=True):
        if param.grad is None:
            param.grad = earlier
        else:
            param.grad.mul_(inverse)
            if earlier is not None:
                param.grad.add_(earlier)
            results.append(param.grad)
    for model_param, master in stash.masters:
        if model_param.grad is not None:
            grad = model_param.grad.float().mul_(inverse)
            master.grad = grad if master.grad is None else master.grad.add_(grad)
            results.append(master.grad)
    stash.kept, stash.scaled = [], False
    return check and not all(bool(torch.isfinite(grad).all()) for grad in results)


def patch_optimizer(optimizer: torch.optim.Optimizer, stash: Stash, zero_in_place: bool) -> None:
    """Give `optimizer` amp's step (skips after an overflow, copies masters back), its
    fused clipping, and, with masters or `zero_in_place`, a zero_grad() that zeroes the
    model's gradients in place and clears the masters'."""
    optimizer._amp_stash = stash  # type: ignore[attr-defined]
    step = optimizer.step

    def amp_step(self: torch.optim.Optimizer, closure: Callable[[], float] | None = None) -> Any:
        if closure is not None and (stash.skip or stash.masters):
            raise RuntimeError("amp does not support a closure in optimizer.step(closure)")
        if stash.skip is not None:
            stash.say(stash.skip)
            stash.skip = None
            for _, master in stash.masters:
                master.grad = None
            return None
        if stash.autocast_device is None:
            result = step(closure)
        else:  # apex computes the step without its casts
            with torch.autocast(stash.autocast_device, enabled=False):
                result = step(closure)
        with torch.no_grad():
            for model_param, master in stash.masters:
                model_param.copy_(master)
                master.grad = None
        return result

    def zero_grad(self: torch.optim.Optimizer) -> None:
        for param in [*_own_params(self), *(p for p, _ in stash.masters)]:
            if param.grad is not None:
                param.grad.detach_()
                param.grad.zero_()
        for _, master in stash.masters:
            master.grad = None

    optimizer.step = types.MethodType(amp_step, optimizer)  # type: ignore[method-assign]
    if stash.masters or zero_in_place:
        optimizer.zero_grad = types.MethodType(zero_grad, optimizer)  # type: ignore[method-assign]

    def clip_optimizer_grad_norm_fused(
        self: torch.optim.Optimizer, max_norm: float, norm_type: float = 2
    ) -> Tensor:
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        return optim_common.clip_together(grads, max_norm, norm_type)

    def clip_model_grad_norm_fused(
        self: torch.optim.Optimizer, max_norm: float, norm_type: float = 2
    ) -> Tensor:
        if stash.masters:
            raise RuntimeError("clip_model_grad_norm_fused can only be used when opt_level='O1'")
        return clip_optimizer_grad_norm_fused(self, max_norm, norm_type)

    optimizer.clip_optimizer_grad_norm_fused = types.MethodType(  # type: ignore[attr-defined]
        clip_optimizer_grad_norm_fused, optimizer
    )
    optimizer.clip_model_grad_norm_fused = types.MethodType(  # type: ignore[attr-defined]
        clip_model_grad_norm_fused, optimizer
    )


def float32_masters(optimizer: torch.optim.Optimizer) -> list[tuple[Tensor, Tensor]]:
    """Replace each float16 parameter of `optimizer` by a float32 copy (its master), the
    optimizer's state moved onto it; the (model parameter, master) pairs."""
    pairs = []
    for group in optimizer.param_groups:
        for index, param in enumerate(group["params"]):
            if not param.requires_grad or param.dtype == torch.float32:
                continue
            if param.dtype != torch.float16:
                raise TypeError(
                    f"amp.initialize: an optimizer's parameter is {param.dtype}: with master "
                    "weights (O2) they must be float32 or float16"
                )
            master = param.detach().clone().float().requires_grad_(True)
            group["params"][index] = master
            pairs.append((param, master))
    optimizer.load_state_dict(optimizer.state_dict())  # the state, keyed and cast anew
    return pairs

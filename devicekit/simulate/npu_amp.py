"""`torch.npu.amp` of the stand-in device, with torch_npu's signatures."""

import collections

import torch
from torch.amp.grad_scaler import OptState as _OptState
from torch.amp.grad_scaler import _refresh_per_optimizer_state


class autocast(torch.amp.autocast_mode.autocast):
    """`torch.autocast("npu", ...)` under torch_npu's older name."""

    def __init__(
        self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True
    ) -> None:
        super().__init__("npu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """torch's GradScaler for "npu"; `dynamic=False` keeps the loss scale fixed, as
    torch_npu's static loss scale does."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        dynamic: bool = True,
        enabled: bool = True,
    ) -> None:
        super().__init__(
            "npu",
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled,
        )
        self._dynamic = dynamic

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """torch's unscale_, with torch_npu's float32 reciprocal of the scale (torch takes it
        in float64, which an NPU avoids): the same operators as on the device, for
        preflight to see."""
        if not self._enabled:
            return
        self._check_scale_growth_tracker("unscale_")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is _OptState.UNSCALED:
            raise RuntimeError(
                "unscale_() has already been called on this optimizer since the last update()."
            )
        if state["stage"] is _OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        assert self._scale is not None  # set by the scale() that came first
        inv_scale = self._scale.float().reciprocal()
        found_inf = torch.zeros((), dtype=torch.float32, device=self._scale.device)
        state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale, found_inf, False)
        state["stage"] = _OptState.UNSCALED

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        if self._dynamic or new_scale is not None or not self._enabled:
            return super().update(new_scale)
        self._per_optimizer_states = collections.defaultdict(_refresh_per_optimizer_state)
        return None


__all__ = ["GradScaler", "autocast"]

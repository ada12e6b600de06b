"""`apex.amp` of Ascend's fork of apex, for `python -m devicekit simulate` where no apex is
installed (apex_site/), mapped onto torch. Names, arguments and defaults are Ascend's:
gitee.com/ascend/apex (patch/npu.patch over NVIDIA apex 4ef930c), recorded with their
sources in tests/test_simulate_apex.py.

How each opt_level runs here:
- O0: float32, nothing cast.
- O1: apex patches torch's functions to compute in float16 where that is safe; here
  torch's autocast (float16) is switched on for the NPU in the thread that called
  initialize, without its weight cache (the weights change at every step), and off
  during optimizer.step(), as apex's casts are.
- O2 (O3): the model is cast to float16, its batch norms kept in float32 (O3: cast too);
  its forward casts floating inputs to float16 and outputs to float32. O2's optimizers
  update float32 master copies of the float16 parameters, copied back at each step.
Loss scaling is apex's (apex_scaling.py). What differs from the NPU: autocast's lists of
float16 and float32 operators are torch's, not apex's, and an overflow is found by
looking for inf and NaN, not by the NPU's float status.
"""

import collections
import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from devicekit.simulate import apex_models, apex_scaling

__all__ = ["initialize", "load_state_dict", "master_params", "scale_loss", "state_dict"]

_DEVICE_TYPE = "npu"  # apex.amp takes models on the NPU only
# opt_level: (what it is, cast_model_type, keep_batchnorm_fp32, master_weights, loss_scale)
_LEVELS = {
    "O0": ("float32 training", torch.float32, None, False, 1.0),
    "O1": ("float16 casts around torch's functions (autocast)", None, None, None, "dynamic"),
    "O2": (
        "float16 model, float32 batch norms and master weights",
        torch.float16,
        True,
        True,
        "dynamic",
    ),
    "O3": ("float16 training", torch.float16, False, False, 1.0),
}


class _Amp:
    """What amp.initialize set up (apex's `_amp_state`)."""

    def __init__(self) -> None:
        self.initialized = False
        self.enabled = False
        self.master_weights = False
        self.combine_ddp = False
        self.verbosity = 1
        self.loss_scalers: list[apex_scaling.LossScaler] = []
        self.autocast_cache: bool | None = None  # autocast's cache setting before O1


_amp = _Amp()


def _say(line: str, rank0: bool = False) -> None:
    if _amp.verbosity > 0 and not (rank0 and dist.is_initialized() and dist.get_rank() != 0):
        print(line, flush=True)


def _refuse(problem: str) -> RuntimeError:
    return RuntimeError(f"amp.initialize: {problem}")


def _loss_scale(value: float | str) -> float | str:
    if value == "dynamic":
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        raise _refuse(
            f"loss_scale={value!r}: give a number (128.0, '128.0') or 'dynamic'"
        ) from None


def _keep_batchnorm(value: bool | str | None) -> bool | None:
    if value in ("True", "False"):
        return value == "True"
    if value is not None and not isinstance(value, bool):
        raise _refuse(f"keep_batchnorm_fp32={value!r}: give True, False, 'True' or 'False'")
    return value


def _overrides_of(level: str, given: dict[str, Any]) -> dict[str, Any]:
    """`level`'s options with the arguments given (not None) in their place; refusals
    where apex refuses a combination."""
    _, cast, keep, masters, scale = _LEVELS[level]
    options: dict[str, Any] = {"cast_model_type": cast, "keep_batchnorm_fp32": keep}
    options["master_weights"] = masters
    options["patch_torch_functions"] = level == "O1"
    options["loss_scale"] = scale
    options["combine_grad"] = None
    problems = {
        "cast_model_type": level == "O1"
        and given["cast_model_type"] not in (None, False, torch.float32),
        "patch_torch_functions": level != "O1" and bool(given["patch_torch_functions"]),
        "keep_batchnorm_fp32": level == "O1" and given["keep_batchnorm_fp32"] is not None,
        "master_weights": level == "O1" and given["master_weights"] is not None,
        "combine_grad": level not in ("O1", "O2") and bool(given["combine_grad"]),
        "check_combined_tensors": level not in ("O1", "O2")
        and bool(given["check_combined_tensors"]),
        "user_cast_preferred": level != "O1" and bool(given["user_cast_preferred"]),
        "combine_ddp": given["combine_ddp"] is not None and not given["combine_grad"],
    }
    for name, refused in problems.items():
        if refused:
            fix = "set combine_grad=True with it" if name == "combine_ddp" else "leave it out"
            raise _refuse(f"{name}={given[name]!r} does not go with opt_level={level!r}: {fix}")
    for name, value in given.items():
        if value is not None and name in options:
            options[name] = value
    options["keep_batchnorm_fp32"] = _keep_batchnorm(options["keep_batchnorm_fp32"])
    options["loss_scale"] = _loss_scale(options["loss_scale"])
    return options


def _zero_grad_in_place(self: torch.nn.Module, set_to_none: bool = False) -> None:
    """torch.nn.Module.zero_grad once apex combines gradients: zeroed, never None."""
    if set_to_none:
        raise AssertionError(
            "Module.zero_grad(set_to_none=True) with combine_grad or apex's NPU fused "
            "optimizers: gradients stay combined; call zero_grad()"
        )
    for param in self.parameters():
        if param.grad is not None:
            param.grad.detach_()
            param.grad.zero_()


def _stop_autocast() -> None:
    if _amp.autocast_cache is not None:
        torch.set_autocast_enabled(_DEVICE_TYPE, False)
        torch.set_autocast_cache_enabled(_amp.autocast_cache)
        _amp.autocast_cache = None


def _start_autocast() -> None:
    _amp.autocast_cache = torch.is_autocast_cache_enabled()
    torch.set_autocast_dtype(_DEVICE_TYPE, torch.float16)
    torch.set_autocast_enabled(_DEVICE_TYPE, True)
    torch.set_autocast_cache_enabled(False)


def initialize(
    models: Any,
    optimizers: Any = None,
    enabled: bool = True,
    opt_level: str = "O1",
    cast_model_type: torch.dtype | None = None,
    patch_torch_functions: bool | None = None,
    keep_batchnorm_fp32: bool | str | None = None,
    master_weights: bool | None = None,
    loss_scale: float | str | None = None,
    cast_model_outputs: torch.dtype | None = None,
    num_losses: int = 1,
    verbosity: int = 1,
    dynamic_init_scale: float = 2.0**16,
    scale_growth_factor: float = 2.0,
    scale_backoff_factor: float = 0.5,
    scale_window: int = 2000,
    min_loss_scale: float | None = None,
    max_loss_scale: float = 2.0**24,
    combine_grad: bool | None = None,
    combine_ddp: bool | None = None,
    ddp_replica_count: int = 4,
    user_cast_preferred: bool | None = None,
    check_combined_tensors: bool | None = None,
) -> Any:
    """Set models and optimizers up for `opt_level` (see the module's docstring); they are
    returned as given (a list stays a list). ddp_replica_count, user_cast_preferred and
    check_combined_tensors tune the NPU's combined tensors, which are not simulated."""
    global _amp
    _stop_autocast()
    _amp = _Amp()
    _amp.verbosity = verbosity
    returned = models if optimizers is None else (models, optimizers)
    if not enabled:
        _amp.initialized = True
        return returned
    if opt_level not in _LEVELS:
        raise _refuse(
            f"unexpected optimization level {opt_level!r}: options are 'O0', 'O1', 'O2', 'O3'"
        )
    given = {
        "cast_model_type": cast_model_type,
        "patch_torch_functions": patch_torch_functions,
        "keep_batchnorm_fp32": keep_batchnorm_fp32,
        "master_weights": master_weights,
        "loss_scale": loss_scale,
        "combine_grad": combine_grad,
        "combine_ddp": combine_ddp,
        "user_cast_preferred": user_cast_preferred,
        "check_combined_tensors": check_combined_tensors,
    }
    options = _overrides_of(opt_level, given)
    model_list = models if isinstance(models, list) else [models]
    optimizer_list = optimizers if isinstance(optimizers, list) else [optimizers]
    optimizer_list = [optimizer for optimizer in optimizer_list if optimizer is not None]
    apex_models.check(model_list, _DEVICE_TYPE)
    fused = [o for o in optimizer_list if getattr(o, "is_npu_fused_optimizer", False) is True]
    if fused and opt_level not in ("O1", "O2"):
        raise _refuse(f"NPU fused optimizers work with opt_level 'O1' or 'O2', not {opt_level!r}")
    if (
        (fused or options["combine_grad"])
        and opt_level == "O2"
        and options["master_weights"] is not True
    ):
        raise _refuse(
            "with opt_level O2, combine_grad or NPU fused optimizers need master_weights=True"
        )
    if combine_ddp and not dist.is_initialized():
        raise _refuse(
            "combine_ddp=True averages gradients over the ranks: init_process_group first"
        )

    cast = options["cast_model_type"]
    for model in model_list:
        if cast not in (None, False):
            apex_models.cast(model, cast, bool(options["keep_batchnorm_fp32"]))
            apex_models.cast_forward(model, cast, cast_model_outputs or torch.float32)
        elif cast_model_outputs is not None:
            apex_models.cast_forward(model, None, cast_model_outputs)
        if combine_ddp:
            for param in model.parameters():
                dist.broadcast(param.data, 0)

    _amp.loss_scalers = [
        apex_scaling.LossScaler(
            options["loss_scale"],
            dynamic_init_scale,
            scale_growth_factor,
            scale_backoff_factor,
            scale_window,
            min_loss_scale,
            max_loss_scale,
        )
        for _ in range(num_losses)
    ]
    in_place = bool(options["combine_grad"]) or bool(fused)
    for optimizer in optimizer_list:
        if hasattr(optimizer, "_amp_stash"):
            raise _refuse("an optimizer goes through amp.initialize once only")
        masters = apex_scaling.float32_masters(optimizer) if options["master_weights"] else []
        autocast = _DEVICE_TYPE if options["patch_torch_functions"] else None
        apex_scaling.patch_optimizer(
            optimizer, apex_scaling.Stash(masters, autocast, _say), in_place
        )
    if options["patch_torch_functions"]:
        _start_autocast()
    if in_place:
        torch.nn.Module.zero_grad = _zero_grad_in_place  # type: ignore[method-assign]
        _say("Module.zero_grad() now zeroes gradients (set_to_none=False) for combined gradients")
    _amp.initialized, _amp.enabled = True, True
    _amp.master_weights = bool(options["master_weights"])
    _amp.combine_ddp = bool(combine_ddp)
    summary = ", ".join(f"{name}={value}" for name, value in options.items())
    _say(f"Selected optimization level {opt_level}: {_LEVELS[opt_level][0]}; {summary}", rank0=True)
    return returned


@contextlib.contextmanager
def scale_loss(
    loss: torch.Tensor,
    optimizers: Any,
    loss_id: int = 0,
    model: torch.nn.Module | None = None,
    delay_unscale: bool = False,
    delay_overflow_check: bool = False,
) -> Iterator[torch.Tensor]:
    """Yield loss.float() times the loss scale for backward(); on exit (unless
    delay_unscale) unscale the gradients for optimizer.step(), which skips the update
    after an overflow with a dynamic scale. `model` is unused, as in apex."""
    if not _amp.initialized:
        raise RuntimeError(
            "amp.scale_loss before amp.initialize: call `model, optimizer = "
            "amp.initialize(model, optimizer, opt_level=...)` first"
        )
    if not _amp.enabled:
        yield loss
        return
    optimizer_list = optimizers if isinstance(optimizers, list) else [optimizers]
    for optimizer in optimizer_list:
        if not hasattr(optimizer, "_amp_stash"):
            raise RuntimeError("amp.scale_loss: this optimizer did not go through amp.initialize")
    scaler = _amp.loss_scalers[loss_id]
    if (
        not _amp.master_weights
        and not scaler.dynamic
        and scaler.scale == 1.0
        and not _amp.combine_ddp
    ):
        yield loss.float()
        return
    if not delay_unscale:
        for optimizer in optimizer_list:
            apex_scaling.prepare_backward(optimizer)
    yield loss.float() * scaler.scale
    if delay_unscale:
        for optimizer in optimizer_list:
            optimizer._amp_stash.scaled = True
        return
    overflow = False
    for optimizer in optimizer_list:
        found = apex_scaling.post_backward(
            optimizer, scaler.scale, scaler.dynamic, _amp.combine_ddp
        )
        overflow = overflow or found
    if not delay_overflow_check and scaler.update(overflow):
        for optimizer in optimizer_list:
            optimizer._amp_stash.skip = (
                f"Gradient overflow.  Skipping step, loss scaler {loss_id} reducing loss "
                f"scale to {scaler.scale}"
            )


def master_params(optimizer: torch.optim.Optimizer) -> Iterator[torch.Tensor]:
    """The parameters `optimizer` updates (O2: the float32 masters), for clipping."""
    for group in optimizer.param_groups:
        yield from group["params"]


def state_dict(destination: dict[str, Any] | None = None) -> dict[str, Any]:
    """Each loss scaler's scale and steps since its last overflow, as apex saves them."""
    if destination is None:
        destination = collections.OrderedDict()
    for index, scaler in enumerate(_amp.loss_scalers):
        destination[f"loss_scaler{index}"] = {
            "loss_scale": scaler.scale,
            "unskipped": scaler.unskipped,
        }
    return destination


def load_state_dict(state_dict: dict[str, Any]) -> None:
    """Restore the loss scalers from amp.state_dict()'s entries."""
    if len(state_dict) != len(_amp.loss_scalers):
        print(
            f"Warning: state_dict contains {len(state_dict)} entries, while "
            f"{len(_amp.loss_scalers)} loss_scalers are used"
        )
    unexpected = [key for key in state_dict if "loss_scaler" not in key]
    if unexpected:
        raise RuntimeError(
            f"amp.load_state_dict: unexpected key(s) {', '.join(map(repr, unexpected))}: "
            "pass what amp.state_dict() returned"
        )
    for scaler, entry in zip(_amp.loss_scalers, state_dict.values(), strict=False):
        scaler.scale = entry["loss_scale"]
        scaler.unskipped = entry["unskipped"]

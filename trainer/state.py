"""What a run keeps between epochs: the LR schedule, checkpoints, and metrics.jsonl."""

import json
import math
import os
from typing import NamedTuple

import torch

import devicekit
from devicekit import atomic_write, checkpoint, checkpoint_files
from devicekit.errors import UsageError

CHECKPOINT = "checkpoint.pth.tar"
BEST = "model_best.pth.tar"
METRICS = "metrics.jsonl"


def lr_factor(epoch, epochs, warmup, schedule):
    """The learning-rate multiplier at `epoch` (fractional: updated every step): linear
    warmup over `warmup` epochs, then step (x0.1 every 30 epochs, as the reference) or
    cosine down to 0 at `epochs`."""
    if epoch < warmup:
        return min(1.0, (epoch + 1e-3) / warmup)
    if schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * (epoch - warmup) / max(1, epochs - warmup)))
    return 0.1 ** (int(epoch) // 30)


def make_scheduler(optimizer, epochs, warmup, schedule, steps_per_epoch):
    """A LambdaLR stepped once per optimizer step, following lr_factor."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step / steps_per_epoch, epochs, warmup, schedule)
    )


class Position(NamedTuple):
    """Where a run stands: the epoch in progress, the training steps of it already done
    (0 at an epoch's start), and what a resumed epoch continues from."""

    epoch: int
    step: int = 0
    best_acc1: float = 0.0
    rng_states: list | None = None  # each rank's torch CPU generator state
    totals: torch.Tensor | None = None  # the epoch's loss sum, top-1, top-5, samples so far


def save(output_dir, state, is_best):
    """Write checkpoint.pth.tar, and model_best.pth.tar when `is_best` or, at an epoch's
    end, when none exists yet; each atomically."""
    path = os.path.join(output_dir, CHECKPOINT)
    checkpoint_files.save_atomic(state, path)
    best = os.path.join(output_dir, BEST)
    if is_best or (not state.get("step") and not os.path.exists(best)):
        atomic_write.copy_atomic(path, best)


def remove_leftovers(output_dir):
    """Remove the temporary files that checkpoint writes killed midway left in
    `output_dir` (a run SIGKILLed, a machine that lost power)."""
    for name in (CHECKPOINT, BEST):
        atomic_write.remove_leftovers(os.path.join(output_dir, name))


def checkpoint_state(position, arch, model, optimizer, scheduler, scaler):
    """The checkpoint dict at `position` (a Position): plain numbers, and a state_dict
    without the `module.` prefix."""
    state = {
        "epoch": int(position.epoch),
        "step": int(position.step),
        "arch": arch,
        "state_dict": devicekit.model_state_dict(model),
        "best_acc1": float(position.best_acc1),
        "optimizer": devicekit.optimizer_state_dict(optimizer, model),
        "scheduler": scheduler.state_dict(),
    }
    if scaler.is_enabled():
        state["scaler"] = scaler.state_dict()
    if position.rng_states is not None:
        state["rng_states"] = position.rng_states
    if position.totals is not None:
        state["totals"] = position.totals.cpu()
    return state


def resume(path, arch, model, optimizer, scheduler, scaler):
    """Load a checkpoint into the run; returns its Position."""
    state = checkpoint_files.load(path, "--resume checkpoint")
    source = f"--resume {path!r}"
    required = ("epoch", "arch", "state_dict", "optimizer")
    if not isinstance(state, dict) or any(key not in state for key in required):
        raise UsageError(
            f"{source} is not a training checkpoint (it needs the keys "
            f"{', '.join(required)}): use a checkpoint.pth.tar written by main.py"
        )
    position = _position(state, source)
    if state["arch"] != arch:
        raise UsageError(
            f"{source} was written for --arch {state['arch']}, not {arch}: "
            f"pass --arch {state['arch']}"
        )
    checkpoint.load_state_dict_into(model, state["state_dict"], source)
    _load_into(optimizer, state["optimizer"], "optimizer", source, model)
    if "scheduler" in state:
        _load_into(scheduler, state["scheduler"], "scheduler", source, model)
    if scaler.is_enabled() and state.get("scaler"):
        _load_into(scaler, state["scaler"], "scaler", source, model)
    return position


def _not_written_by_main(source, what):
    return UsageError(
        f"{source} is not a checkpoint main.py wrote ({what}): use a "
        "checkpoint.pth.tar written by main.py"
    )


def _whole(value, key, source):
    """A count the checkpoint holds: a non-negative int (not a bool, not a float)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _not_written_by_main(source, f"its {key} is {value!r:.40}, not a count")
    return value


def _position(state, source):
    """The Position a checkpoint holds, each field checked against what main.py writes."""
    epoch = _whole(state["epoch"], "epoch", source)
    step = _whole(state.get("step", 0), "step", source)
    best = state.get("best_acc1", 0.0)
    if isinstance(best, bool) or not isinstance(best, (int, float)) or not math.isfinite(best):
        raise _not_written_by_main(source, f"its best_acc1 is {best!r:.40}, not a number")
    if not isinstance(state["arch"], str):
        raise _not_written_by_main(source, f"its arch is {state['arch']!r:.40}, not a name")
    rng_states = state.get("rng_states")
    size = torch.get_rng_state().numel()
    if rng_states is not None and not (
        isinstance(rng_states, list)
        and all(
            isinstance(rng, torch.Tensor)
            and rng.dtype == torch.uint8
            and tuple(rng.shape) == (size,)
            for rng in rng_states
        )
    ):
        raise _not_written_by_main(source, "its rng_states are not generator states")
    totals = state.get("totals")
    if totals is not None and not (
        isinstance(totals, torch.Tensor)
        and tuple(totals.shape) == (4,)
        and totals.dtype.is_floating_point
    ):
        raise _not_written_by_main(source, "its totals are not 4 running sums")
    return Position(epoch, step, float(best), rng_states, totals)


def _load_into(target, state_dict, key, source, model):
    """`state_dict` loaded into `target` (the optimizer of `model`, sharded or not, its
    schedule or loss scaler); a state of another optimizer, schedule or shape is a
    UsageError naming `key`."""
    if not isinstance(state_dict, dict):
        raise _not_written_by_main(source, f"its {key} is a {type(state_dict).__name__}")
    try:
        if isinstance(target, torch.optim.Optimizer):
            devicekit.load_optimizer_state_dict(target, model, state_dict)
            _check_optimizer(target)
        else:
            target.load_state_dict(state_dict)
    except (KeyError, ValueError, TypeError, IndexError, AttributeError, RuntimeError) as error:
        reason = str(error).strip().splitlines()[0][:120] if str(error).strip() else ""
        reason = f"{type(error).__name__}: {reason}" if reason else type(error).__name__
        raise UsageError(
            f"{source}: its {key} state does not fit this run ({reason}): "
            "resume with the flags that wrote it, or start afresh without "
            "--resume"
        ) from None


def _check_optimizer(optimizer):
    """What load_state_dict takes on trust but the next step would trip over: numeric
    hyper-parameters, and per-parameter buffers of the parameter's shape."""
    for group in optimizer.param_groups:
        for name, default in optimizer.defaults.items():
            if name not in group:
                raise ValueError(f"it has no {name}")
            value = group[name]
            if isinstance(default, bool) or default is None:
                fits = value is None or isinstance(value, bool)
            elif isinstance(default, (int, float)):
                fits = not isinstance(value, bool) and isinstance(value, (int, float))
            else:
                fits = True
            if not fits:
                raise ValueError(f"its {name} is {value!r:.40}")
        for param in group["params"]:
            for name, value in optimizer.state.get(param, {}).items():
                if (
                    isinstance(value, torch.Tensor)
                    and value.numel() != 1
                    and value.shape != param.shape
                ):
                    raise ValueError(
                        f"its {name} has shape {tuple(value.shape)} for a "
                        f"parameter of shape {tuple(param.shape)}"
                    )
                if not isinstance(value, (torch.Tensor, int, float, type(None))):
                    raise ValueError(f"its {name} is a {type(value).__name__}")


def resume_path(resume, output_dir):
    """The checkpoint to resume from: `resume` itself, or for "auto" the run's own
    checkpoint in `output_dir` when one exists ("" to start afresh)."""
    if resume != "auto":
        return resume
    path = os.path.join(output_dir, CHECKPOINT)
    return path if os.path.exists(path) else ""


def check_not_finished(epoch, epochs, path):
    """Refuse resuming from `path`, saved at `epoch` (the epochs done), when --epochs
    `epochs` leaves nothing to train: the run would otherwise end at once, silently."""
    if epoch >= epochs:
        raise UsageError(
            f"--resume {path!r} finished at epoch {epoch}, and --epochs {epochs} "
            f"leaves nothing to train: pass --epochs {epoch + 1} or more to train "
            "on, or --evaluate to only validate it"
        )


def load_pretrained(path, model):
    """Load a torchvision-format state_dict (or a checkpoint holding one) into `model`."""
    state = checkpoint_files.load(path, "--pretrained file")
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    checkpoint.load_state_dict_into(model, state, f"--pretrained {path!r}")


def append_metrics(output_dir, row):
    """Add one JSON line to metrics.jsonl."""
    with open(os.path.join(output_dir, METRICS), "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")

"""What a run keeps between epochs: the LR schedule, checkpoints, and metrics.jsonl."""

import json
import math
import os
from typing import NamedTuple, Optional

import torch

from devicekit import checkpoint
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
        optimizer, lambda step: lr_factor(step / steps_per_epoch, epochs, warmup, schedule))


class Position(NamedTuple):
    """Where a run stands: the epoch in progress, the training steps of it already done
    (0 at an epoch's start), and what a resumed epoch continues from."""

    epoch: int
    step: int = 0
    best_acc1: float = 0.0
    rng_states: Optional[list] = None  # each rank's torch CPU generator state
    totals: Optional[torch.Tensor] = None  # the epoch's loss sum, top-1, top-5, samples so far


def save(output_dir, state, is_best):
    """Write checkpoint.pth.tar, and model_best.pth.tar when `is_best` or, at an epoch's
    end, when none exists yet; each atomically."""
    path = os.path.join(output_dir, CHECKPOINT)
    checkpoint.save_atomic(state, path)
    best = os.path.join(output_dir, BEST)
    if is_best or (not state.get("step") and not os.path.exists(best)):
        checkpoint.copy_atomic(path, best)


def checkpoint_state(position, arch, model, optimizer, scheduler, scaler):
    """The checkpoint dict at `position` (a Position): plain numbers, and a state_dict
    without the `module.` prefix."""
    state = {"epoch": int(position.epoch), "step": int(position.step), "arch": arch,
             "state_dict": checkpoint.strip_prefix(model.state_dict()),
             "best_acc1": float(position.best_acc1), "optimizer": optimizer.state_dict(),
             "scheduler": scheduler.state_dict()}
    if scaler.is_enabled():
        state["scaler"] = scaler.state_dict()
    if position.rng_states is not None:
        state["rng_states"] = position.rng_states
    if position.totals is not None:
        state["totals"] = position.totals.cpu()
    return state


def resume(path, arch, model, optimizer, scheduler, scaler):
    """Load a checkpoint into the run; returns its Position."""
    state = checkpoint.load(path, "--resume checkpoint")
    required = ("epoch", "arch", "state_dict", "optimizer")
    if not isinstance(state, dict) or any(key not in state for key in required):
        raise UsageError(f"--resume {path!r} is not a training checkpoint (it needs the keys "
                         f"{', '.join(required)}): use a checkpoint.pth.tar written by main.py")
    if state["arch"] != arch:
        raise UsageError(f"--resume {path!r} was written for --arch {state['arch']}, not "
                         f"{arch}: pass --arch {state['arch']}")
    checkpoint.load_state_dict_into(model, state["state_dict"], f"--resume {path!r}")
    optimizer.load_state_dict(state["optimizer"])
    if "scheduler" in state:
        scheduler.load_state_dict(state["scheduler"])
    if scaler.is_enabled() and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])
    return Position(int(state["epoch"]), int(state.get("step", 0)),
                    float(state.get("best_acc1", 0.0)), state.get("rng_states"),
                    state.get("totals"))


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
        raise UsageError(f"--resume {path!r} finished at epoch {epoch}, and --epochs {epochs} "
                         f"leaves nothing to train: pass --epochs {epoch + 1} or more to train "
                         "on, or --evaluate to only validate it")


def load_pretrained(path, model):
    """Load a torchvision-format state_dict (or a checkpoint holding one) into `model`."""
    state = checkpoint.load(path, "--pretrained file")
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    checkpoint.load_state_dict_into(model, state, f"--pretrained {path!r}")


def append_metrics(output_dir, row):
    """Add one JSON line to metrics.jsonl."""
    with open(os.path.join(output_dir, METRICS), "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")

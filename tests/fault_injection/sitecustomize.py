"""Fault injection for tests/test_faults.py, loaded by Python at start-up through PYTHONPATH.

Inert unless FAULT_KIND is set. Then, when `trainer.loop` is imported (by main.py, in a
launcher's worker or in a process started by multiprocessing's spawn, which runs this
file too), its train_one_epoch and prepare_batch are wrapped: in the process whose
torch.distributed rank is FAULT_RANK, the FAULT_AT_STEP-th training step (counted from 1
over the whole run) first writes {"time": time.time(), "rank", "step", "pid", "kind"} as
JSON to FAULT_STAMP (atomically; with FAULT_ONCE=1 a stamp already there means the fault
fired before, in a run that has since been restarted, and nothing happens) and then

    FAULT_KIND=kill   sends itself SIGKILL (a crash no Python code sees), or
    FAULT_KIND=raise  raises RuntimeError("injected fault") (an ordinary Python error).
    FAULT_KIND=pause  waits there, mid-step, for a signal (a scheduler's requeue or
                      scancel) to end it; FAULT_PAUSE_S (default 120) bounds the wait, after
                      which it raises.

With FAULT_KIND=kill-in-save, torch.distributed.checkpoint's file-system writer is wrapped
instead: in rank FAULT_RANK, the FAULT_AT_SAVE-th save of a checkpoint folder writes this
rank's files, stamps (step: the save's number) and sends itself SIGKILL, before the
checkpoint's metadata is written.

The production code has no hook for this: the module is patched from outside.
"""

import os
import sys

_KIND = os.environ.get("FAULT_KIND")


def _fault_now(rank, step):
    stamp = os.environ.get("FAULT_STAMP")
    if stamp and os.environ.get("FAULT_ONCE") and os.path.exists(stamp):
        return  # fired in an earlier attempt: a restarted run goes on undisturbed
    if stamp:
        import json
        import time

        tmp = f"{stamp}.{os.getpid()}.tmp"
        with open(tmp, "w") as handle:
            json.dump(
                {
                    "time": time.time(),
                    "rank": rank,
                    "step": step,
                    "pid": os.getpid(),
                    "kind": _KIND,
                },
                handle,
            )
        os.replace(tmp, stamp)  # the test never reads half a stamp
    if _KIND in ("kill", "kill-in-save"):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    if _KIND == "pause":
        import time

        time.sleep(float(os.environ.get("FAULT_PAUSE_S", "120")))
        raise RuntimeError("injected pause: no signal came")
    raise RuntimeError("injected fault")


def _rank():
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else None


def _patch_loop(loop):
    fault_rank = int(os.environ.get("FAULT_RANK", "1"))
    fault_step = int(os.environ.get("FAULT_AT_STEP", "1"))
    state = {"training": False, "steps": 0}
    train_one_epoch, prepare_batch = loop.train_one_epoch, loop.prepare_batch

    def wrapped_train_one_epoch(*args, **kwargs):
        state["training"] = True
        try:
            return train_one_epoch(*args, **kwargs)
        finally:
            state["training"] = False

    def wrapped_prepare_batch(*args, **kwargs):
        if state["training"]:  # validation batches are not steps
            state["steps"] += 1
            if state["steps"] == fault_step and _rank() == fault_rank:
                _fault_now(fault_rank, fault_step)
        return prepare_batch(*args, **kwargs)

    # train_one_epoch looks prepare_batch up in the module's globals at every step, and
    # main.py calls loop.train_one_epoch through the module: both wrappers take effect.
    loop.train_one_epoch, loop.prepare_batch = wrapped_train_one_epoch, wrapped_prepare_batch


def _patch_writer(filesystem):
    fault_rank = int(os.environ.get("FAULT_RANK", "1"))
    fault_save = int(os.environ.get("FAULT_AT_SAVE", "1"))
    state = {"saves": 0}
    write_data = filesystem._FileSystemWriter.write_data

    def wrapped_write_data(self, plan, planner):
        written = write_data(self, plan, planner)
        state["saves"] += 1
        if state["saves"] == fault_save and _rank() == fault_rank:
            written.wait()  # this rank's files are on disk
            _fault_now(fault_rank, fault_save)
        return written

    filesystem._FileSystemWriter.write_data = wrapped_write_data


class _PatchOnImport:
    """A meta-path finder that lets the normal finders load the target module, then patches it."""

    def __init__(self, target, patch):
        self.target, self.patch = target, patch

    def find_spec(self, name, path, target=None):
        if name != self.target:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            self.patch(module)

        spec.loader.exec_module = exec_and_patch  # this spec's own loader instance
        return spec


if not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
    if _KIND in ("kill", "raise", "pause"):
        sys.meta_path.insert(0, _PatchOnImport("trainer.loop", _patch_loop))
    elif _KIND == "kill-in-save":
        sys.meta_path.insert(
            0, _PatchOnImport("torch.distributed.checkpoint.filesystem", _patch_writer)
        )

"""`devicekit.profile`: the device's own profiler for any training script.

torch.profiler sees the CPU and CUDA; on an Ascend NPU the profiler is torch_npu's, with
its own activities and trace handler. `profile()` asks the process's device kind, so one
script profiles wherever it runs:

    with devicekit.profile("runs/profile", wait=1, warmup=1, active=3) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()
"""

import os

from devicekit import runtime
from devicekit.errors import UsageError
from devicekit.kinds.base import Profiler


def profile(
    output_dir: str | os.PathLike[str],
    *,
    wait: int = 1,
    warmup: int = 1,
    active: int = 3,
    repeat: int = 1,
    record_shapes: bool = False,
    profile_memory: bool = False,
    with_stack: bool = False,
) -> Profiler:
    """A profiler for this process's device, used as a context manager with `.step()`
    after each training step: it skips `wait` steps, warms up for `warmup`, records
    `active`, `repeat` times (0: until the end), and writes each recording to `output_dir`
    (a `*.pt.trace.json` that TensorBoard's profiler view and Perfetto open; torch_npu's
    layout on an NPU). Options as torch.profiler.profile's."""
    for name, value, least in (
        ("wait", wait, 0),
        ("warmup", warmup, 0),
        ("active", active, 1),
        ("repeat", repeat, 0),
    ):
        if not isinstance(value, int) or value < least:
            raise UsageError(
                f"devicekit.profile(): {name}={value!r} must be an integer of at least {least}"
            )
    try:
        os.makedirs(output_dir, exist_ok=True)
    except OSError as error:
        raise UsageError(
            f"devicekit.profile(): the trace folder {output_dir!r} cannot be made "
            f"({error.strerror}): choose a writable folder"
        ) from None
    if not os.access(output_dir, os.W_OK):
        raise UsageError(
            f"devicekit.profile(): the trace folder {output_dir!r} is not "
            f"writable: choose a writable folder"
        )
    return runtime.kind().profiler(
        os.fspath(output_dir),
        wait=wait,
        warmup=warmup,
        active=active,
        repeat=repeat,
        record_shapes=record_shapes,
        profile_memory=profile_memory,
        with_stack=with_stack,
    )

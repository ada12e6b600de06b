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
import types
from typing import Any

from devicekit import runtime, writable
from devicekit.errors import UsageError, warn
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
    if not isinstance(output_dir, (str, os.PathLike)) or not os.fspath(output_dir):
        raise UsageError(
            f"devicekit.profile(): output_dir={output_dir!r} must name a folder for the "
            "trace, such as 'runs/profile'"
        )
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
    reason = writable.cannot_hold_files(output_dir)
    if reason is not None:
        raise UsageError(
            f"devicekit.profile(): the trace folder {output_dir!r} cannot hold files "
            f"({reason}): choose a writable folder"
        )
    profiler = runtime.kind().profiler(
        os.fspath(output_dir),
        wait=wait,
        warmup=warmup,
        active=active,
        repeat=repeat,
        record_shapes=record_shapes,
        profile_memory=profile_memory,
        with_stack=with_stack,
    )
    return _Counted(profiler, os.fspath(output_dir), wait + warmup)


class _Counted:
    """The device's profiler, counting its steps, so that a run that ends before the
    schedule records is told why its trace folder is empty."""

    def __init__(self, profiler: Profiler, output_dir: str, before_recording: int) -> None:
        self._profiler, self._output_dir = profiler, output_dir
        self._before_recording, self._steps = before_recording, 0

    def __enter__(self) -> "_Counted":
        self._profiler.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: types.TracebackType | None,
        /,
    ) -> bool | None:
        stopped = self._profiler.__exit__(exc_type, exc, traceback)
        if exc_type is None and self._steps < self._before_recording:
            warn(
                f"devicekit.profile(): nothing was recorded in {self._output_dir!r}: the "
                f"run took {self._steps} step(s) and recording starts after "
                f"{self._before_recording} (wait + warmup); call .step() after each "
                "training step, or lower wait and warmup"
            )
        return stopped

    def step(self) -> None:
        """Advance the schedule: call it after each training step."""
        self._steps += 1
        self._profiler.step()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._profiler, name)  # key_averages(), export_chrome_trace(), ...

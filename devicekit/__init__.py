"""devicekit: one PyTorch program on NVIDIA GPUs, Ascend NPUs and CPUs, under any launcher.

The small public API:

- ``resolve_kind(requested)`` -> DeviceKind (cuda | npu | cpu): backend, devices, AMP, ...
- ``resolve_launch(options, kind=kind)`` -> LaunchContext: who this process is.
- ``process_group(ctx, kind)``: join the collective group and always leave it;
  ``wrap_ddp``, ``broadcast_buffers``, ``all_reduce_sum``, ``barrier``.
- ``spawn(fn, nprocs, args, kind)``: one process per device, with the kind's start method.
- ``split_per_process``, ``seed_everything``, ``autocast``, ``grad_scaler``.
- ``UsageError`` and ``exit_on_usage_error``: one clear line and exit code 2.
"""

import os
import sys

# torch >= 2.5 imports installed device plugins (torch_npu) inside `import torch`; when
# CANN is missing that makes `import torch` itself fail. devicekit imports torch_npu
# itself when an NPU is asked for or probed, so switch the autoload off unless the
# user chose, or torch is already imported.
if "torch" not in sys.modules:
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

from devicekit.amp import autocast, grad_scaler  # noqa: E402
from devicekit.batching import split_per_process  # noqa: E402
from devicekit.detect import resolve_kind  # noqa: E402
from devicekit.distributed import (  # noqa: E402
    all_reduce_sum, barrier, broadcast_buffers, destroy_process_group, init_process_group,
    process_group, resolve_backend, wrap_ddp)
from devicekit.errors import UsageError, exit_on_usage_error, warn  # noqa: E402
from devicekit.launch import LaunchContext, LaunchOptions, resolve_launch  # noqa: E402
from devicekit.processes import spawn  # noqa: E402
from devicekit.seeding import seed_everything  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "LaunchContext", "LaunchOptions", "UsageError", "all_reduce_sum", "autocast", "barrier",
    "broadcast_buffers", "destroy_process_group", "exit_on_usage_error", "grad_scaler",
    "init_process_group", "process_group", "resolve_backend", "resolve_kind", "resolve_launch",
    "seed_everything", "spawn", "split_per_process", "warn", "wrap_ddp",
]

"""devicekit: one PyTorch program on NVIDIA GPUs, Ascend NPUs and CPUs, under any launcher.

A flat API in the manner of torch.accelerator: module-level functions whose answers
(the device kind, who this process is) are settled once per process.

    import devicekit

    def main(local_rank, cfg):
        devicekit.init_distributed()          # any launcher; binds the device, joins the group
        device = devicekit.device()           # cuda:i | npu:i | cpu
        model = devicekit.wrap_ddp(Net().to(device))
        scaler = devicekit.GradScaler()       # a no-op where no loss scaling is needed
        with devicekit.autocast():            # the device's type and default precision
            loss = ...
        devicekit.save_checkpoint("ckpt.pt", {"model": model})

    if __name__ == "__main__":
        devicekit.launch(main, args=(cfg,))   # python script.py | torchrun | a shell loop | ...

The documentation's API reference (docs/reference.md) lists every function.
"""

import os
import sys

# torch >= 2.5 imports installed device plugins (torch_npu) inside `import torch`; when
# CANN is missing that makes `import torch` itself fail. devicekit imports torch_npu
# itself when an NPU is asked for or probed, so switch the autoload off unless the
# user chose, or torch is already imported.
if "torch" not in sys.modules:
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

from devicekit import errors as _errors
from devicekit.accelerator import (
    accelerator_type,
    backend,
    current_device,
    default_ranks_per_node,
    device,
    device_count,
    device_type,
    empty_cache,
    is_accelerator,
    is_available,
    is_bf16_supported,
    manual_seed,
    manual_seed_all,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    pin_memory,
    reset_peak_memory_stats,
    set_device,
    synchronize,
)
from devicekit.amp import (
    GradScaler,
    amp_dtype,
    amp_enabled,
    autocast,
    prefers_channels_last,
)
from devicekit.checkpoint import (
    fingerprint,
    load_checkpoint,
    load_model_state_dict,
    load_optimizer_state_dict,
    model_state_dict,
    optimizer_state_dict,
    save_checkpoint,
)
from devicekit.compiling import compile
from devicekit.ddp import broadcast_buffers, no_sync, unwrap, wrap_ddp
from devicekit.distributed import (
    all_reduce_sum,
    barrier,
    destroy_process_group,
    init_distributed,
    is_initialized,
    is_main_process,
    local_rank,
    local_world_size,
    node_rank,
    rank,
    world_size,
)
from devicekit.environments import LaunchContext, LaunchOptions
from devicekit.errors import (
    UsageError,
    exit_on_usage_error,
    report_usage_errors,
    warn,
)
from devicekit.kinds import register_kind
from devicekit.processes import (
    RankFailed,
    die_with_launcher,
    launch,
    nprocs_per_node,
)
from devicekit.profiler import profile
from devicekit.seeding import seed_everything
from devicekit.sharding import shard, unsharded
from devicekit.simulate import activate_from_environment
from devicekit.workers import worker_context

# DEVICEKIT_SIMULATE=npu: the stand-in npu device, in this process and every rank it starts.
try:
    activate_from_environment()
except UsageError as _error:
    _errors.say(f"error: {_error}")
    raise SystemExit(2) from None

# A UsageError that escapes the user's script: one line and exit code 2, no traceback.
report_usage_errors()

# A rank of launch/run_8p.sh dies with it, even when the script is SIGKILLed.
die_with_launcher()

__version__ = "0.3.0"

__all__ = [
    "GradScaler",
    "LaunchContext",
    "LaunchOptions",
    "RankFailed",
    "UsageError",
    "accelerator_type",
    "all_reduce_sum",
    "amp_dtype",
    "amp_enabled",
    "autocast",
    "backend",
    "barrier",
    "broadcast_buffers",
    "compile",
    "current_device",
    "default_ranks_per_node",
    "destroy_process_group",
    "device",
    "device_count",
    "device_type",
    "empty_cache",
    "exit_on_usage_error",
    "fingerprint",
    "init_distributed",
    "is_accelerator",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "is_main_process",
    "launch",
    "load_checkpoint",
    "load_model_state_dict",
    "load_optimizer_state_dict",
    "local_rank",
    "local_world_size",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "model_state_dict",
    "no_sync",
    "node_rank",
    "nprocs_per_node",
    "optimizer_state_dict",
    "pin_memory",
    "prefers_channels_last",
    "profile",
    "rank",
    "register_kind",
    "reset_peak_memory_stats",
    "save_checkpoint",
    "seed_everything",
    "set_device",
    "shard",
    "synchronize",
    "unsharded",
    "unwrap",
    "warn",
    "worker_context",
    "world_size",
    "wrap_ddp",
]

"""`compile(model)`: torch.compile with the compiler this device's stack has.

Inductor on CPUs and CUDA GPUs, and on NPUs through torch_npu's own Inductor backend
(`torch_npu._inductor`, which torch_npu sets up on the first compile). Where the device has
no compiler (the npu stand-in: inductor generates no code for its device), one warning line
and the model runs eagerly, instead of a page of inductor traceback.
"""

from typing import Any

import torch

from devicekit import runtime
from devicekit.distributed import is_main_process
from devicekit.errors import warn
from devicekit.sharding import is_sharded


def compile(model: torch.nn.Module, **options: Any) -> torch.nn.Module:
    """`model` compiled for this process's device (`torch.compile` with the backend the
    device kind names; `options` go to torch.compile and win), or `model` itself, eager,
    with one warning line where the device has no compiler.

    A model sharded by `shard()` compiles with static shapes (`dynamic=False`) unless told:
    FSDP2 breaks the graph at each sharded block, so blocks of one class with different
    widths (a ResNet's stages) share one compiled forward, and the dynamic shapes torch
    would otherwise give it after the first recompile fail inside inductor's backward
    (torch 2.13)."""
    kind = runtime.kind()
    backend = kind.compile_backend()
    if backend is None:
        if is_main_process():
            warn(f"{kind.no_compiler_reason()}: the model is not compiled and runs eagerly")
        return model
    options.setdefault("backend", backend)
    if is_sharded(model):
        options.setdefault("dynamic", False)
    # torch.compile(module) returns an OptimizedModule, a Module; its stub says Callable.
    compiled: torch.nn.Module = torch.compile(model, **options)  # type: ignore[assignment]
    return compiled

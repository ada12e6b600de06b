"""`from torch_npu.contrib import transfer_to_npu` on the npu stand-in: an unchanged CUDA
script runs on `npu`, as torch-npu 2.13.0's transfer_to_npu makes it run on an Ascend NPU.

What changes, as the wheel's module changes it (install() does it once per process):

- torch.cuda, torch.cuda.amp and torch.cuda.random answer with torch.npu's names: every
  name the stand-in's torch.npu offers (`is_available()` is True). A torch.cuda function
  that torch_npu.npu would answer and the stand-in does not have says so when called.
- `Tensor.cuda` and `Module.cuda` are `.npu`; `Tensor.is_cuda` is `is_npu`.
- A CUDA device ("cuda", "cuda:1", torch.device("cuda", 1); an int in `.to()`) given to
  torch's factory functions, torch.load's map_location, Tensor.new_*/to/pin_memory,
  Module.to/to_empty, autocast, torch.cuda's functions, DDP/FSDP/DeviceMesh names the npu
  device of that index.
- The nccl backend is hccl in init_process_group and new_group.
- torch.jit.script and script_method give back what they are given, with a warning.
- torch.backends.cuda and cudnn flags (cudnn.benchmark, allow_tf32) are left as they
  are: accepted and meaningless, as on an Ascend NPU. torch.cuda.nvtx is left too: its
  calls fail as they do there ("NVTX functions not installed", torch's CPU build).

Not redirected, because the wheel sends them to torch_npu parts the stand-in lacks: the
profiler's CUDA activity, CUDA graphs, memory history, torch.Generator/torch.Event proxies
and torch.compile's inductor (triton, GPU type).
"""

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import os
import re
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

import torch
import torch.distributed as dist
import torch.distributed.device_mesh
import torch.utils._device
from torch.nn.parameter import UninitializedTensorMixin  # type: ignore[attr-defined]

import devicekit.simulate as _simulate
from devicekit.simulate import npu_amp, npu_module

_Function = Callable[..., Any]

# torch.* functions whose device arguments are redirected (the wheel's list, as torch has it).
_TORCH_FACTORIES = (
    "arange", "as_tensor", "bartlett_window", "blackman_window", "empty", "empty_like",
    "empty_quantized", "empty_strided", "eye", "from_file", "frombuffer", "full", "full_like",
    "get_device_module", "hamming_window", "hann_window", "kaiser_window", "linspace", "load",
    "logspace", "normal", "ones", "ones_like", "rand", "rand_like", "randint", "randint_like",
    "randn", "randn_like", "randperm", "range", "scalar_tensor", "set_default_device",
    "sparse_compressed_tensor", "sparse_coo_tensor", "sparse_csr_tensor", "tensor",
    "tril_indices", "triu_indices", "zeros", "zeros_like",
)  # fmt: skip
_TENSOR_METHODS = ("new_empty", "new_empty_strided", "new_full", "new_ones", "new_tensor",
                   "new_zeros", "pin_memory")  # fmt: skip
# The torch.cuda functions torch_npu.npu answers in the wheel (its __all__ and torch.cuda's).
_NPU_ANSWERS = (
    "caching_allocator_alloc", "caching_allocator_delete", "can_device_access_peer",
    "change_current_allocator", "current_blas_handle", "current_device", "current_stream",
    "default_stream", "device_count", "empty_cache", "get_allocator_backend",
    "get_device_capability", "get_device_name", "get_device_properties",
    "get_per_process_memory_fraction", "get_rng_state", "get_rng_state_all",
    "get_sync_debug_mode", "graph_pool_handle", "host_memory_stats",
    "host_memory_stats_as_nested_dict", "init", "initial_seed", "ipc_collect", "is_available",
    "is_bf16_supported", "is_current_stream_capturing", "is_initialized",
    "make_graphed_callables", "manual_seed", "manual_seed_all", "max_memory_allocated",
    "max_memory_cached", "max_memory_reserved", "mem_get_info", "memory_allocated",
    "memory_cached", "memory_reserved", "memory_snapshot", "memory_stats",
    "memory_stats_as_nested_dict", "memory_summary", "reset_accumulated_host_memory_stats",
    "reset_accumulated_memory_stats", "reset_max_memory_allocated", "reset_max_memory_cached",
    "reset_peak_host_memory_stats", "reset_peak_memory_stats", "seed", "seed_all",
    "set_device", "set_per_process_memory_fraction", "set_rng_state", "set_rng_state_all",
    "set_stream", "set_sync_debug_mode", "stream", "synchronize", "use_mem_pool",
    "utilization",
)  # fmt: skip
_DEVICE_KEYWORDS = ("device", "device_type", "map_location", "device_id")
_CUDA_DEVICE = re.compile(r"cuda(:[0-9]+)?")
_NOTE = (
    "torch_npu.contrib.transfer_to_npu: torch.cuda.* and torch.cuda.amp.* are torch.npu's, "
    ".cuda() is .npu(), a 'cuda' device given to torch's factories, torch.load, .to() and "
    "DDP is npu, and the nccl backend is hccl (npu stand-in: NPU numerics and speed are "
    "not simulated)"
)
_NO_JIT = (
    "torch_npu.contrib.transfer_to_npu: torch.jit.script and torch.jit.script_method now "
    "return what they are given, as on an Ascend NPU; leave transfer_to_npu out to script"
)

_installed = False


def _npu(value: object, ints: bool = False) -> object:
    """`value` naming the npu device where it names a CUDA device; anything else as it is.
    An int is a device index only where `ints` says so (`.to(0)`)."""
    if isinstance(value, str):
        found = _CUDA_DEVICE.fullmatch(value)
        return f"npu{found.group(1) or ''}" if found else value
    if isinstance(value, torch.device):
        return torch.device("npu", value.index) if value.type == "cuda" else value
    if ints and isinstance(value, int) and not isinstance(value, bool):
        return f"npu:{value}"
    if isinstance(value, dict):  # torch.load's map_location={"cuda:0": "cuda:1"}
        return {_npu(key): _npu(item) for key, item in value.items()}
    return value


def _redirected(function: _Function, ints: bool = False) -> _Function:
    """`function` taking CUDA devices, in its arguments and its device keywords, as npu."""

    @functools.wraps(function)
    def call(*args: object, **kwargs: object) -> Any:
        for key in _DEVICE_KEYWORDS:
            if key in kwargs:
                kwargs[key] = _npu(kwargs[key], ints=True)  # device=0 is cuda:0 in torch
        ids = kwargs.get("device_ids")
        if isinstance(ids, (list, tuple)):
            kwargs["device_ids"] = type(ids)(_npu(index, ints) for index in ids)
        return function(*(_npu(arg, ints) for arg in args), **kwargs)

    return call


def _hccl(backend: object) -> object:
    """A backend string with nccl named hccl and cuda npu ("cuda:nccl,cpu:gloo")."""
    if not isinstance(backend, str):
        return backend
    backend = re.sub(r"\bcuda\b", "npu", backend, flags=re.IGNORECASE)
    return re.sub(r"\bnccl\b", "hccl", backend, flags=re.IGNORECASE)


def _with_hccl(function: _Function) -> _Function:
    """`function` whose `backend` argument, by position or keyword, asks nccl for hccl."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def call(*args: object, **kwargs: object) -> Any:
        bound = signature.bind_partial(*args, **kwargs)
        if "backend" in bound.arguments:
            bound.arguments["backend"] = _hccl(bound.arguments["backend"])
        return function(*bound.args, **bound.kwargs)

    return call


def _not_provided(name: str) -> _Function:
    """A torch.cuda function the wheel answers with torch_npu.npu's and the stand-in lacks."""

    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise RuntimeError(
            f"torch.cuda.{name} is torch.npu.{name} under transfer_to_npu, which the npu "
            "stand-in does not provide: it needs a real Ascend NPU with torch_npu 2.13.0"
        )

    refuse.__name__ = refuse.__qualname__ = name
    return refuse


class _CudaDevice(npu_module.device):
    """torch.npu.device, taking "cuda:1" too: `with torch.cuda.device(1):`."""

    def __init__(self, device: object) -> None:
        super().__init__(_npu(device))  # type: ignore[arg-type]


def _redirect_cuda_module() -> None:
    """torch.cuda, torch.cuda.amp and torch.cuda.random answer with torch.npu's names."""
    import torch.cuda.amp.autocast_mode
    import torch.cuda.amp.grad_scaler

    offered = set(npu_module.__all__)
    for name in offered:
        value = getattr(npu_module, name)
        if not isinstance(value, types.ModuleType):  # torch.cuda.amp stays a module of its own
            setattr(torch.cuda, name, _redirected(value) if inspect.isroutine(value) else value)
    for name in set(_NPU_ANSWERS) - offered:
        setattr(torch.cuda, name, _not_provided(name))
    for name in torch.cuda.random.__all__:
        setattr(torch.cuda.random, name, getattr(torch.cuda, name))
    torch.cuda.device = _CudaDevice  # type: ignore[misc,assignment]
    for name in npu_amp.__all__:
        setattr(torch.cuda.amp, name, getattr(npu_amp, name))
    torch.cuda.amp.autocast_mode.autocast = npu_amp.autocast  # type: ignore[misc,assignment]
    torch.cuda.amp.grad_scaler.GradScaler = npu_amp.GradScaler  # type: ignore[misc,assignment]


def _redirect_tensors_and_modules() -> None:
    """`.cuda()` is `.npu()`; CUDA devices in torch's factories, `.to()`, new_* are npu."""
    torch.utils._device._device_constructors()  # cache torch's own, as the device mode needs
    for name in _TORCH_FACTORIES:
        if hasattr(torch, name):
            setattr(torch, name, _redirected(getattr(torch, name)))
    for name in ("fftfreq", "rfftfreq"):
        setattr(torch.fft, name, _redirected(getattr(torch.fft, name)))
    for name in _TENSOR_METHODS:
        setattr(torch.Tensor, name, _redirected(getattr(torch.Tensor, name)))
    torch.Tensor.to = _redirected(torch.Tensor.to, ints=True)  # type: ignore[method-assign]
    # Lazy modules' parameters allow only the methods on this list: `to` is now ours (the
    # one listed may already be another's wrapper, preflight's recorder's: it stays too).
    UninitializedTensorMixin._allowed_methods.append(torch.Tensor.to)
    torch.Tensor.cuda = _redirected(torch.Tensor.npu)  # type: ignore[attr-defined,method-assign]
    torch.Tensor.is_cuda = torch.Tensor.is_npu  # type: ignore[attr-defined]
    storage = torch.storage.TypedStorage
    storage.is_cuda = storage.is_npu  # type: ignore[attr-defined,method-assign]
    for name in ("to", "to_empty"):
        setattr(torch.nn.Module, name, _redirected(getattr(torch.nn.Module, name), ints=True))
    module = torch.nn.Module
    module.cuda = _redirected(module.npu)  # type: ignore[attr-defined,method-assign]
    torch.utils._device.DeviceContext.__init__ = _redirected(  # type: ignore[method-assign]
        torch.utils._device.DeviceContext.__init__
    )
    torch._utils._get_available_device_type = lambda: "npu"


def _redirect_autocast() -> None:
    """autocast("cuda"), torch.is_autocast_enabled() and custom_fwd name the npu device."""
    autocast = torch.amp.autocast_mode.autocast
    autocast.__init__ = _redirected(autocast.__init__)  # type: ignore[method-assign]
    is_enabled = torch.is_autocast_enabled
    set_enabled = _redirected(torch.set_autocast_enabled)

    @functools.wraps(is_enabled)
    def is_autocast_enabled(device_type: str | None = None) -> bool:
        return is_enabled("npu" if device_type in (None, "cuda") else device_type)

    @functools.wraps(set_enabled)
    def set_autocast_enabled(*args: Any, **kwargs: Any) -> None:
        if len(args) + len(kwargs) == 1:  # set_autocast_enabled(enabled): CUDA's, once
            args, kwargs = ("npu", *args, *kwargs.values()), {}
        set_enabled(*args, **kwargs)

    torch.is_autocast_enabled = is_autocast_enabled
    torch.set_autocast_enabled = set_autocast_enabled
    torch.get_autocast_dtype = _redirected(torch.get_autocast_dtype)
    torch.set_autocast_dtype = _redirected(torch.set_autocast_dtype)
    torch.get_autocast_gpu_dtype = functools.partial(torch.get_autocast_dtype, "npu")
    torch.set_autocast_gpu_dtype = functools.partial(torch.set_autocast_dtype, "npu")
    torch.amp.custom_fwd = _redirected(torch.amp.custom_fwd)
    torch.amp.custom_bwd = _redirected(torch.amp.custom_bwd)


_FSDP = "torch.distributed.fsdp"


def _redirect_fsdp(fsdp: types.ModuleType) -> None:
    """FSDP's device_id names the npu device."""
    cls = fsdp.FullyShardedDataParallel
    cls.__init__ = _redirected(cls.__init__)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls `then` with module `name` once its import has run, the first time it runs."""

    def __init__(self, name: str, then: Callable[[types.ModuleType], None]) -> None:
        self.name, self.then = name, then

    def find_spec(
        self, fullname: str, path: object, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = spec.loader if spec is not None else None
        if loader is None:
            return spec
        run = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            run(module)
            self.then(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _redirect_distributed() -> None:
    """nccl is hccl; DDP's, FSDP's and DeviceMesh's CUDA devices are npu."""
    c10d = dist.distributed_c10d
    dist.init_process_group = _with_hccl(_redirected(dist.init_process_group))
    c10d.init_process_group = dist.init_process_group
    c10d._new_group_with_tag = _with_hccl(c10d._new_group_with_tag)
    dist.is_nccl_available = functools.partial(dist.is_backend_available, "hccl")
    # With no backend named, a process group gets gloo for cpu and hccl for npu, no nccl.
    dist.Backend.default_device_backend_map.pop("cuda", None)
    ddp = torch.nn.parallel.DistributedDataParallel
    ddp.__init__ = _redirected(ddp.__init__)  # type: ignore[method-assign]
    if _FSDP in sys.modules:
        _redirect_fsdp(sys.modules[_FSDP])
    else:  # importing FSDP takes seconds: redirect it when the script imports it
        sys.meta_path.insert(0, _AfterImport(_FSDP, _redirect_fsdp))
    mesh = torch.distributed.device_mesh
    mesh.DeviceMesh.__init__ = _redirected(mesh.DeviceMesh.__init__)  # type: ignore[method-assign]
    mesh.init_device_mesh = _redirected(mesh.init_device_mesh)
    if hasattr(dist, "init_device_mesh"):
        dist.init_device_mesh = mesh.init_device_mesh


def _unscripted(obj: object, *args: object, **kwargs: object) -> object:
    """torch.jit.script under transfer_to_npu: `obj` itself, run eagerly."""
    return obj


def _on_rank_zero() -> bool:
    """Whether this process is rank 0, or one process alone (the wheel warns on rank 0)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist.get_rank() == 0
    return os.environ.get("RANK", "0") == "0"


def _warn(message: str, category: type[Warning]) -> None:
    # ImportWarning is ignored by default; the wheel shows its own (it sets filters to "once").
    with warnings.catch_warnings():
        warnings.simplefilter("default", category)
        warnings.warn(message, category, stacklevel=3)  # where transfer_to_npu is


def install() -> None:
    """Make this process's torch take CUDA calls as npu ones; once, the stand-in active."""
    global _installed
    if _installed:
        return
    if not _simulate._active:
        raise RuntimeError(
            "transfer_to_npu needs the npu stand-in: import torch_npu under `python -m "
            "devicekit simulate`, or call devicekit.simulate.activate() first"
        )
    if _on_rank_zero():
        _warn(_NOTE, ImportWarning)
    _redirect_cuda_module()
    _redirect_tensors_and_modules()
    _redirect_autocast()
    _redirect_distributed()
    _warn(_NO_JIT, RuntimeWarning)
    torch.jit.script = _unscripted  # type: ignore[assignment]
    torch.jit.script_method = lambda fn: fn
    _installed = True

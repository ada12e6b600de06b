"""What `devicekit port` knows about names: what maps onto devicekit, what it leaves alone.

Qualified names are the ones libcst's QualifiedNameProvider resolves through the script's
imports (`from torch.cuda.amp import autocast` makes `autocast` read
`torch.cuda.amp.autocast`). An Ascend name (`torch.npu.X`, `torch_npu.npu.X`: torch_npu
gives torch.npu torch.cuda's API) is ported as its CUDA twin `torch.cuda.X` is.
"""

import re

# torch.cuda.X -> devicekit.X, with the number of arguments devicekit's function takes.
DEVICEKIT_FUNCTIONS: dict[str, int] = {
    "set_device": 1,
    "manual_seed": 1,
    "manual_seed_all": 1,
    "device_count": 0,
    "is_available": 0,
    "current_device": 0,
    "synchronize": 0,
    "empty_cache": 0,
    "memory_allocated": 0,
    "max_memory_allocated": 0,
    "memory_reserved": 0,
    "max_memory_reserved": 0,
    "reset_peak_memory_stats": 0,
    "is_bf16_supported": 0,
}

_NPU_MODULES = ("torch.npu.", "torch_npu.npu.")
TORCH_NPU = "torch_npu"
# Process-wide NPU settings (`torch.npu.set_compile_mode(jit_compile=False)`): they run as
# before on an NPU, under `if devicekit.device_type() == "npu":`, and nowhere else.
NPU_SETTINGS = {
    "set_compile_mode",
    "set_option",
    "set_aoe",
    "set_mm_bmm_format_nd",
    "config.allow_internal_format",
    "conv.allow_hf32",
    "matmul.allow_hf32",
}


def cuda_twin(qualified: str) -> str | None:
    """The torch.cuda name an Ascend name stands for (`torch.npu.synchronize`,
    `torch_npu.npu.amp.autocast` -> `torch.cuda.synchronize`, `torch.cuda.amp.autocast`),
    else None."""
    for prefix in _NPU_MODULES:
        if qualified.startswith(prefix):
            return "torch.cuda." + qualified[len(prefix) :]
    return None


def with_twins(qualified: set[str]) -> set[str]:
    """`qualified` and the CUDA twins of its Ascend names."""
    return qualified | {twin for twin in map(cuda_twin, qualified) if twin}


def npu_setting(qualified: str) -> str | None:
    """ "set_compile_mode" for `torch.npu.set_compile_mode` (and the other NPU_SETTINGS,
    under torch.npu or torch_npu.npu), else None."""
    twin = cuda_twin(qualified)
    short = twin[len("torch.cuda.") :] if twin else None
    return short if short in NPU_SETTINGS else None


AUTOCAST = {"torch.cuda.amp.autocast", "torch.cuda.amp.autocast_mode.autocast"}
CUDA_GRAD_SCALER = {"torch.cuda.amp.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler"}
SPAWN = {"torch.multiprocessing.spawn", "torch.multiprocessing.spawn.spawn"}
DEVICE_COUNT = "torch.cuda.device_count"
OUT_OF_MEMORY = "torch.cuda.OutOfMemoryError"

CUDA_GRAD_SCALER_PARAMS = (
    "init_scale",
    "growth_factor",
    "backoff_factor",
    "growth_interval",
    "enabled",
)
SPAWN_PARAMS = ("fn", "args", "nprocs", "join", "daemon", "start_method")


# Constructs left alone and reported: qualified-name prefix -> (why, manual fix).
_TIMING = (
    "CUDA events time work on an NVIDIA GPU only",
    "time the region with devicekit.synchronize() and time.perf_counter()",
)
_GRAPHS = (
    "CUDA graphs capture and replay kernels on NVIDIA GPUs only",
    "run eagerly off CUDA: guard the capture with `if devicekit.device_type() == "
    '"cuda":` (or use torch.compile(mode="reduce-overhead"))',
)
_NVTX = (
    "NVTX ranges are markers for NVIDIA's profilers",
    "use torch.profiler.record_function(name), which every device supports",
)
_CAPABILITY = (
    "a device-capability check reads NVIDIA properties",
    'decide from devicekit.device_type() (and torch.cuda only when it is "cuda")',
)
_NAME = (
    "the device name is an NVIDIA property",
    "report devicekit.device() and devicekit.device_type() instead",
)
_FREE_MEMORY = (
    "free device memory is queried from the NVIDIA driver",
    "use devicekit.memory_reserved() / devicekit.max_memory_allocated() (0 on a CPU)",
)
_STREAMS = (
    "CUDA streams exist on NVIDIA GPUs only",
    'guard with `if devicekit.device_type() == "cuda":` or drop the stream',
)
_TENSOR_TYPES = (
    "a torch.cuda tensor type allocates on an NVIDIA GPU",
    "create the tensor with device=devicekit.device() (or x.to(devicekit.device(), dtype=...))",
)
_RNG = (
    "the CUDA generator state exists on NVIDIA GPUs only",
    'save/restore it under `if devicekit.device_type() == "cuda":`; torch.get_rng_state() '
    "covers the CPU",
)
_EXTENSION = (
    "a custom C++/CUDA extension is compiled for NVIDIA GPUs",
    'keep a pure-PyTorch fallback and use it when devicekit.device_type() != "cuda"',
)
_DATA_PARALLEL = (
    "nn.DataParallel is single-process multi-GPU: CUDA-only (a pass-through "
    "elsewhere) and slower than DDP",
    "start one process per device (torchrun, or devicekit.launch(fn)), call "
    "devicekit.init_distributed() and wrap with devicekit.wrap_ddp(model)",
)
_FUNCTIONAL_DATA_PARALLEL = (
    "replicate, scatter, parallel_apply and gather are nn.DataParallel by hand: "
    "single-process multi-GPU, CUDA-only (the CPU builds of torch that Ascend uses lack "
    "torch._C._broadcast_coalesced)",
    _DATA_PARALLEL[1],
)
_APEX = (
    "apex (NVIDIA's, or Ascend's fork with combine_grad and NpuFused*) runs on one "
    "device kind only",
    "use torch's own equivalents: devicekit.autocast() + devicekit.GradScaler() for "
    "amp.initialize/scale_loss, devicekit.wrap_ddp for apex DDP, torch.optim.AdamW and "
    "torch.nn.LayerNorm for the fused kernels",
)
_KERNELS = (
    "hand-written GPU kernels run on NVIDIA GPUs only",
    'keep a PyTorch fallback selected when devicekit.device_type() != "cuda" (or let '
    "torch.compile generate the kernel)",
)
_NVML = ("NVML queries NVIDIA GPUs only", 'guard with `if devicekit.device_type() == "cuda":`')
_NPU_OPS = (
    "a torch_npu operator runs on Ascend NPUs only",
    'keep a PyTorch fallback, selected when devicekit.device_type() != "npu"',
)
_NPU_OPTIMIZERS = (
    "torch_npu's fused optimizers run on Ascend NPUs only",
    "use torch.optim (SGD, AdamW, ...), which runs on every device",
)
_NPU_PROFILER = (
    "torch_npu's profiler records Ascend NPUs only",
    'use torch.profiler, with the NPU\'s activity added when devicekit.device_type() == "npu"',
)
_NPU_UNKNOWN = (
    "this name exists only where torch_npu is installed, and devicekit port knows "
    "no portable equivalent",
    'guard it with `if devicekit.device_type() == "npu":`',
)
_UNKNOWN = (
    "devicekit port knows no portable equivalent of this torch.cuda name",
    'guard with `if devicekit.device_type() == "cuda":`, or use the torch.accelerator equivalent',
)
_ARGUMENTS = (
    "devicekit's function takes no device argument: it acts on the current device",
    "call it without the argument (after devicekit.set_device(i) where needed)",
)
_AUTOCAST_ARGS = (
    "devicekit.autocast() takes only enabled= and dtype=",
    "drop cache_enabled= (and any *args/**kwargs) and write "
    "devicekit.autocast(enabled=..., dtype=...) by name",
)
_GRAD_SCALER_ARGS = (
    "the GradScaler's arguments cannot be read (*args or **kwargs), or ask "
    "for torch_npu's static loss scale (dynamic=False)",
    "use devicekit.GradScaler(enabled=..., init_scale=..., ...) by name; for "
    "a scale that never grows, growth_interval=2**31 - 1 (it still backs "
    "off on an overflow)",
)
_SPAWN_ARGS = (
    "devicekit.launch() always joins its ranks and uses the device's start method",
    "call devicekit.launch(fn, args=..., nprocs=...) and drop join=/daemon=/start_method=",
)
_CUDA_ARGS = (
    "the arguments of .cuda() or .npu() cannot be read (*args or **kwargs)",
    "write x.to(devicekit.device(i), non_blocking=...)",
)
_SWITCH = (
    "torch.cuda.device(i) switches the current CUDA device",
    "call devicekit.set_device(i), or pass devicekit.device(i) where the device is used",
)
_PIN_CALL = (
    "Tensor.pin_memory() fails where no accelerator is present",
    "pin only when devicekit.pin_memory() is True",
)

_SDPA = (
    "the SDPA backend switches act on every device: with the math kernel off, a CPU or "
    "an NPU is left with no attention kernel",
    'switch them under `if devicekit.device_type() == "cuda":`',
)

MANUAL: dict[str, tuple[str, str]] = {
    "torch.backends.cuda.sdp_kernel": _SDPA,
    "torch.backends.cuda.enable_math_sdp": _SDPA,
    "torch.backends.cuda.enable_flash_sdp": _SDPA,
    "torch.backends.cuda.enable_mem_efficient_sdp": _SDPA,
    "torch.backends.cuda.enable_cudnn_sdp": _SDPA,
    "torch.cuda.Event": _TIMING,
    "torch.cuda.Stream": _STREAMS,
    "torch.cuda.stream": _STREAMS,
    "torch.cuda.current_stream": _STREAMS,
    "torch.cuda.default_stream": _STREAMS,
    "torch.cuda.StreamContext": _STREAMS,
    "torch.cuda.device": _SWITCH,
    "torch.cuda.graph": _GRAPHS,
    "torch.cuda.CUDAGraph": _GRAPHS,
    "torch.cuda.graphs": _GRAPHS,
    "torch.cuda.make_graphed_callables": _GRAPHS,
    "torch.cuda.graph_pool_handle": _GRAPHS,
    "torch.cuda.nvtx": _NVTX,
    "nvtx": _NVTX,
    "torch.cuda.get_device_capability": _CAPABILITY,
    "torch.cuda.get_device_properties": _CAPABILITY,
    "torch.cuda.get_device_name": _NAME,
    "torch.cuda.get_arch_list": _CAPABILITY,
    "torch.cuda.mem_get_info": _FREE_MEMORY,
    "torch.cuda.get_rng_state": _RNG,
    "torch.cuda.set_rng_state": _RNG,
    "torch.cuda.get_rng_state_all": _RNG,
    "torch.cuda.set_rng_state_all": _RNG,
    "torch.utils.cpp_extension.load": _EXTENSION,
    "torch.utils.cpp_extension.load_inline": _EXTENSION,
    "torch.utils.cpp_extension.CUDAExtension": _EXTENSION,
    "torch.nn.DataParallel": _DATA_PARALLEL,
    "torch.nn.parallel.DataParallel": _DATA_PARALLEL,
    "torch.nn.parallel.data_parallel": _DATA_PARALLEL,
    "torch.nn.parallel.replicate": _FUNCTIONAL_DATA_PARALLEL,
    "torch.nn.parallel.scatter": _FUNCTIONAL_DATA_PARALLEL,
    "torch.nn.parallel.gather": _FUNCTIONAL_DATA_PARALLEL,
    "torch.nn.parallel.scatter_gather": _FUNCTIONAL_DATA_PARALLEL,
    "torch.nn.parallel.parallel_apply": _FUNCTIONAL_DATA_PARALLEL,
    "torch.nn.parallel.comm": _FUNCTIONAL_DATA_PARALLEL,
    "apex": _APEX,
    "cupy": _KERNELS,
    "triton": _KERNELS,
    "pynvml": _NVML,
}
_TENSOR_TYPE = re.compile(r"^torch\.cuda\.[A-Z][A-Za-z]*Tensor$")


def manual_reason(qualified: str) -> tuple[str, str] | None:
    """(why, fix) for a name devicekit port leaves alone, or None."""
    if _TENSOR_TYPE.match(qualified):
        return _TENSOR_TYPES
    parts = qualified.split(".")
    for end in range(len(parts), 0, -1):
        found = MANUAL.get(".".join(parts[:end]))
        if found:
            return found
    if qualified.startswith("torch.cuda."):
        return _UNKNOWN
    if qualified.split(".")[0] == TORCH_NPU or qualified.startswith("torch.npu."):
        return _npu_reason(qualified)
    return None


def _npu_reason(qualified: str) -> tuple[str, str]:
    parts = qualified.split(".")
    if parts[0] == TORCH_NPU and len(parts) > 1 and parts[1].startswith("npu_"):
        return _NPU_OPS
    if qualified.startswith("torch_npu.optim"):
        return _NPU_OPTIMIZERS
    if qualified.startswith(("torch_npu.profiler", "torch_npu.utils.profiler")):
        return _NPU_PROFILER
    return _NPU_UNKNOWN


REASONS = {
    "arguments": _ARGUMENTS,
    "autocast-args": _AUTOCAST_ARGS,
    "grad-scaler-args": _GRAD_SCALER_ARGS,
    "spawn-args": _SPAWN_ARGS,
    "cuda-args": _CUDA_ARGS,
    "pin-memory-call": _PIN_CALL,
}

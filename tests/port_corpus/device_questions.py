"""The device questions a training library asks before it acts, as CUDA-only code asks
them: which backend, whether a tensor is on the GPU, which device types get a loss scaler.

Ported and called by the tests on a CPU, on the npu stand-in and on a GPU (each answer is
the same as the original's on a GPU, and the accelerator's on an NPU).
"""
import torch
import torch.distributed as dist


def choose_backend(use_gpu):
    if not dist.is_available():
        return None
    elif use_gpu and dist.is_nccl_available():
        return "nccl"
    return "gloo"


def answers(model, x):
    """(the dtype autocast computed in, whether the step was synchronized, whether this
    device type gets a loss scaler)"""
    with torch.cuda.amp.autocast():
        y = model(x)
    synchronized = False
    if y.is_cuda:
        torch.cuda.synchronize()
        synchronized = True
    scaled = x.device.type in ("cuda",)
    return str(y.dtype), synchronized, scaled

"""NVIDIA GPUs through torch.cuda, collectives over NCCL."""

import os

import torch

from devicekit.kinds.base import AcceleratorKind
from devicekit.kinds.visible import parse_cuda


class CudaKind(AcceleratorKind):
    name = "cuda"
    default_backend = "nccl"
    # gloo also moves CUDA tensors; it is a legitimate (slow) choice.
    accepted_backends = frozenset({"nccl", "gloo"})
    visible_devices_env = "CUDA_VISIBLE_DEVICES"
    install_hint = "install a CUDA build of torch and check `nvidia-smi`"

    def visible_devices(self, environ):
        value = environ.get(self.visible_devices_env)
        return None if value is None else parse_cuda(self.visible_devices_env, value)

    def default_amp(self):
        # Tensor cores: NVIDIA's published ResNet-50 figures are fp16 AMP + channels_last.
        return True

    def prefers_channels_last(self, amp):
        return amp

    @staticmethod
    def _accelerator_type():
        accelerator = torch.accelerator.current_accelerator()
        return None if accelerator is None else accelerator.type

    def device_count(self):
        return self.module.device_count() if self._accelerator_type() == "cuda" else 0

    def probe(self):
        # Ask torch.accelerator, not torch.cuda.is_available(): torch_npu's
        # transfer_to_npu shim patches the latter to report True on an NPU machine.
        if self._accelerator_type() != "cuda":
            return False, ("this torch has no CUDA support "
                           f"(torch.accelerator reports {self._accelerator_type()}); "
                           f"{self.install_hint}")
        self.visible_devices(os.environ)
        if self.module.device_count() == 0:
            return False, ("no GPU is visible "
                           f"({self.visible_devices_env}={os.environ.get(self.visible_devices_env)!r}); "
                           "check `nvidia-smi` and the variable")
        return True, ""

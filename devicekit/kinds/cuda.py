"""NVIDIA GPUs through torch.cuda, collectives over NCCL."""

from collections.abc import Mapping

from devicekit.kinds.base import AcceleratorKind
from devicekit.kinds.visible import parse_cuda


class CudaKind(AcceleratorKind):
    name = "cuda"
    default_backend = "nccl"
    # gloo also moves CUDA tensors; it is a legitimate (slow) choice.
    accepted_backends = frozenset({"nccl", "gloo"})
    backend_owner = "NVIDIA GPUs"
    visible_devices_env: str = "CUDA_VISIBLE_DEVICES"
    display_name, device_noun = "CUDA", "GPU"
    install_hint = "install a CUDA build of torch and check `nvidia-smi`"
    check_hint = "check `nvidia-smi` and the variable"
    profiler_activities = ("CPU", "CUDA")

    def visible_devices(self, environ: Mapping[str, str]) -> list[int | str] | None:
        value = environ.get(self.visible_devices_env)
        return None if value is None else parse_cuda(self.visible_devices_env, value)

    def default_amp(self) -> bool:
        # Tensor cores: NVIDIA's published ResNet-50 figures are fp16 AMP + channels_last.
        return True

    def prefers_channels_last(self, amp: bool) -> bool:
        return amp

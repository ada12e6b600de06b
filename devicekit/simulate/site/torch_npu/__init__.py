"""The npu stand-in's `torch_npu`: what `import torch_npu` gives under `python -m devicekit
simulate`, where no real torch_npu is installed.

It offers only names torch-npu 2.13.0 has, with their parameters (tests/test_npu_honesty.py
reads the wheel): `npu` (torch.npu), `optim`, `profiler`, `contrib.transfer_to_npu`, the
fused operators Ascend code calls most (PyTorch references of the semantics the wheel
documents: devicekit/simulate/fused/) and `__version__`. Any other name of the real module
is absent, so a feature check (`hasattr(torch_npu, "npu_grouped_matmul")`) keeps working,
and using one says in one line that it needs a real Ascend NPU.
"""

import devicekit.simulate as _simulate

if not _simulate.activate_from_environment():
    _simulate.activate()  # on PYTHONPATH without `devicekit simulate`: its defaults

import devicekit.simulate.npu_module as npu  # noqa: F401  (torch_npu.npu: torch.npu, activated)
import torch_npu.optim as optim  # noqa: F401  (torch_npu imports its optim and profiler)
import torch_npu.profiler as profiler  # noqa: F401
from devicekit.simulate.fused.activations import npu_scaled_masked_softmax, npu_swiglu
from devicekit.simulate.fused.attention import npu_fusion_attention
from devicekit.simulate.fused.layout import get_npu_format, npu_confusion_transpose, npu_format_cast
from devicekit.simulate.fused.norms import npu_add_rms_norm, npu_rms_norm
from devicekit.simulate.fused.rotary import npu_rotary_mul

__version__ = "2.13.0+devicekit.standin"

__all__ = [
    "get_npu_format",
    "npu_add_rms_norm",
    "npu_confusion_transpose",
    "npu_format_cast",
    "npu_fusion_attention",
    "npu_rms_norm",
    "npu_rotary_mul",
    "npu_scaled_masked_softmax",
    "npu_swiglu",
]


def __getattr__(name: str) -> object:
    raise AttributeError(
        f"torch_npu.{name} is not provided by the npu stand-in: it needs a real Ascend NPU "
        "with torch_npu 2.13.0"
    )

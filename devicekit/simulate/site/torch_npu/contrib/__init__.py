"""torch_npu.contrib of the npu stand-in: its transfer_to_npu module
(`from torch_npu.contrib import transfer_to_npu` above an unchanged CUDA script).

None of the wheel's contrib functions and modules (npu_iou, ROIAlign, ...) is provided: each
is absent (hasattr False), and using one says in one line that it needs a real Ascend NPU.
"""

__all__: list[str] = []


def __getattr__(name: str) -> object:
    raise AttributeError(
        f"torch_npu.contrib.{name} is not provided by the npu stand-in: it needs a real "
        "Ascend NPU with torch_npu 2.13.0"
    )

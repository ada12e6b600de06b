"""torch_npu's layout operators: `npu_confusion_transpose` (a permute and a reshape in one
kernel) and the storage formats, `npu_format_cast` and `get_npu_format`.

The stand-in keeps every tensor in its plain layout: there are no internal (NPU-private)
formats, so a format cast changes nothing and a tensor's format is the base format the
real runtime gives a tensor of its rank (torch_npu's InferFormat::GuessBaseFormat):
NCHW (0) for 4-D, NCDHW (30) for 5-D, ND (2) otherwise; the values of torch_npu.Format
(torch_npu/npu/_format.py:7). So `get_npu_format(x) == 29` (FRACTAL_NZ) never holds here.
"""

import collections.abc

import torch

from devicekit.simulate.fused import _common

__all__ = ["get_npu_format", "npu_confusion_transpose", "npu_format_cast"]

_NCHW, _ND, _NCDHW = 0, 2, 30
# torch_npu.Format's values (torch_npu/npu/_format.py:7).
_FORMATS = frozenset({-1, 0, 1, 2, 3, 4, 12, 16, 27, 29, 30, 32, 33, 35, 47, 50, 51, 52, 53, 54})


def npu_confusion_transpose(
    self: torch.Tensor,
    perm: collections.abc.Sequence[int],
    shape: collections.abc.Sequence[int],
    transpose_first: bool,
) -> torch.Tensor:
    """self permuted by `perm` then reshaped to `shape` (transpose_first), or reshaped then
    permuted; a contiguous tensor, as the kernel writes one."""
    perm, target = list(perm), list(shape)
    if sorted(perm) != list(range(len(perm))):
        raise _common.refuse(
            "npu_confusion_transpose",
            f"perm={perm} is not a permutation of the dimensions",
            "list each dimension index once",
        )
    try:
        if transpose_first:
            return self.permute(perm).reshape(target).contiguous()
        return self.reshape(target).permute(perm).contiguous()
    except RuntimeError as error:
        raise _common.refuse(
            "npu_confusion_transpose",
            f"perm={perm}, shape={target} do not fit an input of shape {list(self.shape)} "
            f"({str(error).splitlines()[0]})",
            "check that perm has one entry per dimension and shape keeps the element count",
        ) from None


def npu_format_cast(
    self: torch.Tensor,
    acl_format: int,
    *,
    customize_dtype: int | None = None,
    input_dtype: int | None = None,
) -> torch.Tensor:
    """`self` itself: the stand-in has no internal formats to convert to (so the dtypes
    that would size an internal format's blocks change nothing either). The parameters are
    those of torch_npu/csrc/aten/npu_native_functions.yaml:81; the docs list the first two."""
    if int(acl_format) not in _FORMATS:
        raise _common.refuse(
            "npu_format_cast",
            f"acl_format={acl_format} is not a torch_npu.Format value",
            "use one of torch_npu.Format's values, e.g. 2 (ND) or 29 (FRACTAL_NZ)",
        )
    return self


def get_npu_format(self: torch.Tensor) -> int:
    """The base format of a tensor of self's rank: 0 (NCHW) for 4-D, 30 (NCDHW) for 5-D,
    2 (ND) otherwise."""
    return {4: _NCHW, 5: _NCDHW}.get(self.dim(), _ND)

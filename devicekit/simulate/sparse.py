"""Sparse tensors on the stand-in: refused in one line, as not simulated.

torch_npu 2.13.0 itself computes almost nothing on them: it registers NPU kernels for
sparse tensors for add, mul, max and coalesce only, and a fallback for every other
operator on its sparse key that raises "not currently supported on the NPU backend"
(torch_npu/csrc/aten/VariableFallbackKernel.cpp). So the stand-in gives sparse tensors no
kernels either: any operator that reaches them (the constructor of a sparse gradient,
from nn.Embedding or nn.EmbeddingBag with sparse=True, first) raises a UsageError that
names the operator and the fix.
"""

import torch

from devicekit.errors import UsageError

_library: torch.library.Library | None = None


def _refuse(op: torch._ops.OpOverload, *args: object, **kwargs: object) -> object:
    name: str = op.name()  # type: ignore[no-untyped-call]  # torch's OpOverload.name
    raise UsageError(
        f"sparse tensors are not simulated by the npu stand-in ({name} makes one: a sparse "
        "gradient, as nn.Embedding and nn.EmbeddingBag give with sparse=True), and torch_npu "
        "2.13.0 computes only add, mul, max and coalesce on them: use dense gradients "
        "(sparse=False)"
    )


def register() -> None:
    """Make every operator on a sparse npu tensor raise the UsageError above."""
    global _library
    if _library is not None:
        return
    # torch.library.Library is unannotated
    _library = torch.library.Library("_", "IMPL")  # type: ignore[no-untyped-call]
    for key in ("SparsePrivateUse1", "SparseCsrPrivateUse1"):
        _library.fallback(_refuse, key)  # type: ignore[no-untyped-call]

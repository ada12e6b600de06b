"""`sparse-gradient`: a layer or operator asked for a sparse gradient
(`nn.Embedding(sparse=True)`, `nn.EmbeddingBag(sparse=True)`, `torch.gather(...,
sparse_grad=True)`), seen as its forward runs with the weight requiring a gradient.

On an NPU the backward then fails: torch_npu 2.13.0 registers NPU kernels for sparse
tensors for add, mul, max and coalesce only, and every other operator on one (the
constructor of the sparse gradient among them) reaches its sparse fallback, which raises
"not currently supported on the NPU backend" instead of running it on the CPU. So the
operators on sparse tensors are not cpu-fallback findings; this one names their cause.
What the dense gradient needs is checked like any operator (nn.Embedding's,
aten::embedding_dense_backward, is on torch_npu's list).
"""

from devicekit.preflight.checks.base import Context, Finding
from devicekit.preflight.checks.tables import from_table
from devicekit.preflight.recording import Calls, Recording

KIND = "sparse-gradient"
ADVICE = (
    "make the gradient dense: sparse=False (sparse_grad=False for gather); an optimizer "
    "kept for sparse gradients (SparseAdam) becomes Adam or AdamW"
)


def _detail(what: str, calls: Calls) -> str:
    return (
        f"{what}: its gradient is a sparse tensor, which torch_npu 2.13.0 cannot build on the "
        "NPU (sparse kernels for add, mul, max and coalesce only): backward fails there"
    )


def findings(recording: Recording, context: Context) -> list[Finding]:
    return from_table(KIND, recording.sparse_gradients, _detail)

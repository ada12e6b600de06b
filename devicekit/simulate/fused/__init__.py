"""torch_npu's fused operators as PyTorch references, for the npu stand-in: each computes
what torch_npu 2.13.0 documents for it (torch_npu/_op_plugin_docs.py), with the shapes
and dtypes of its meta registration, on tensors of any device, differentiable where the real
operator has a backward. Nothing here is fast: it is the arithmetic, not the kernel.

norms.py (npu_rms_norm, npu_add_rms_norm), attention.py (npu_fusion_attention),
rotary.py (npu_rotary_mul), activations.py (npu_swiglu, npu_scaled_masked_softmax) and
layout.py (npu_confusion_transpose, npu_format_cast, get_npu_format) stand for names of the
torch_npu module, with its parameters. register() also offers the computing ones as
torch.ops.npu.<name>, the form some code calls.
"""

import collections.abc

import torch

from devicekit.simulate.fused import activations, attention, layout, norms, rotary

__all__ = ["register"]

# The schema of each operator as torch_npu 2.13.0 declares it in torch.ops.npu
# (torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml), and its reference.
_SCHEMAS: dict[str, tuple[str, collections.abc.Callable[..., object]]] = {
    "npu_rms_norm": (
        "(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)",
        norms.npu_rms_norm,
    ),
    "npu_add_rms_norm": (
        "(Tensor x1, Tensor x2, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor, Tensor)",
        norms.npu_add_rms_norm,
    ),
    "npu_rotary_mul": (
        "(Tensor self, Tensor r1, Tensor r2, str rotary_mode='half', Tensor? rotate=None) "
        "-> Tensor",
        rotary.npu_rotary_mul,
    ),
    "npu_swiglu": ("(Tensor self, int dim=-1) -> Tensor", activations.npu_swiglu),
    "npu_scaled_masked_softmax": (
        "(Tensor x, Tensor mask, Scalar scale=1, bool fixed_triu_mask=False) -> Tensor",
        activations.npu_scaled_masked_softmax,
    ),
    "npu_confusion_transpose": (
        "(Tensor self, int[] perm, int[] shape, bool transpose_first) -> Tensor",
        layout.npu_confusion_transpose,
    ),
}
_FUSION_ATTENTION = (
    "(Tensor query, Tensor key, Tensor value, int head_num, str input_layout, "
    "Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, float scale=1., "
    "float keep_prob=1., int pre_tockens=2147483647, int next_tockens=2147483647, "
    "int inner_precise=0, int[]? prefix=None, int[]? actual_seq_qlen=None, "
    "int[]? actual_seq_kvlen=None, int sparse_mode=0, bool gen_mask_parallel=True, "
    'bool sync=False, str softmax_layout="", Tensor? sink=None, Tensor? dropout_mask=None, '
    "int seed=0, int offset=0) -> (Tensor, Tensor, Tensor, Tensor, int, int, int)"
)

_library: torch.library.Library | None = None


def _fusion_attention(*args: object) -> object:
    """torch.ops.npu.npu_fusion_attention: its schema's last four arguments (sink,
    dropout_mask, seed, offset), which torch_npu's Python docs do not list, are refused."""
    documented, extra = args[:20], args[20:]  # the dispatcher leaves trailing defaults out
    if extra != (None, None, 0, 0)[: len(extra)]:
        raise NotImplementedError(
            "torch.ops.npu.npu_fusion_attention: sink, dropout_mask, seed and offset are not "
            "provided by the npu stand-in: it needs a real Ascend NPU with torch_npu 2.13.0"
        )
    return attention.npu_fusion_attention(*documented)  # type: ignore[arg-type]


def register() -> None:
    """Define torch.ops.npu.<name> for the computing operators above, each a composite of
    torch operators (so autograd differentiates it on any device)."""
    global _library
    if _library is not None:
        return
    # torch.library.Library is unannotated
    library = torch.library.Library("npu", "FRAGMENT")  # type: ignore[no-untyped-call]
    operators = {
        **_SCHEMAS,
        "npu_fusion_attention": (_FUSION_ATTENTION, _fusion_attention),
    }
    for name, (schema, function) in operators.items():
        library.define(name + schema)  # type: ignore[no-untyped-call]
        library.impl(name, function, "CompositeImplicitAutograd")  # type: ignore[no-untyped-call]
    _library = library

"""`cpu-fallback`: operators the pinned torch_npu does not implement, which run on the CPU
there with a copy each way (torch_npu warns "not currently supported on the NPU backend").

No false alarms: an operator counts only when a device backend receives it. Composite
operators decompose into others first; the CPU picks CPU-only kernels where an NPU
receives the operator before that choice (mapped back here); profiler bookkeeping is not
compute; operators of other namespaces (c10d collectives, user extensions) are not aten's.
"""

import functools

import torch

from devicekit.preflight import npu_ops
from devicekit.preflight.checks.base import Context, Finding
from devicekit.preflight.recording import Recording

KIND = "cpu-fallback"
ADVICE = (
    "torch_npu runs these on the CPU, copying tensors each way: use an equivalent "
    "listed operator, or move the call out of the step"
)

# What the CPU picks -> what an NPU receives in its place (the latter listed).
CPU_ONLY = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": (
        "aten::scaled_dot_product_attention"
    ),
    "aten::mkldnn_rnn_layer": "aten::lstm.input",
    "aten::mkldnn_rnn_layer_backward": "aten::lstm.input",
    "aten::_thnn_fused_lstm_cell": "aten::lstm.input",
    "aten::_thnn_fused_lstm_cell_backward_impl": "aten::lstm.input",
    "aten::_thnn_fused_gru_cell": "aten::gru.input",
    "aten::_thnn_fused_gru_cell_backward": "aten::gru.input",
    "aten::mkldnn_convolution": "aten::convolution",
    "aten::_slow_conv2d_forward": "aten::convolution",
    "aten::_slow_conv2d_backward.output_mask": "aten::convolution_backward",
}
# Kernels that serve every backend without one of its own by calling other operators.
# What to do instead, where one switch avoids the operator.
HINTS = {
    "aten::_transformer_encoder_layer_fwd": "nn.TransformerEncoder's inference fast path: "
    "torch.backends.mha.set_fastpath_enabled(False) keeps it on listed operators",
    "aten::_native_multi_head_attention": "nn.MultiheadAttention's inference fast path: "
    "torch.backends.mha.set_fastpath_enabled(False) keeps it on listed operators",
}
_DECOMPOSED = ("CompositeImplicitAutograd", "CompositeExplicitAutograd")


def reaches_backend(name: str) -> bool:
    """Whether a device backend itself receives operator `name`, rather than what it
    decomposes into."""
    if not name.startswith("aten::") or name.startswith("aten::_record_function"):
        return False
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    if any(has(name, key) for key in _DECOMPOSED):
        return False
    # A structured operator's CompositeExplicitAutogradNonFunctional kernel calls its own
    # out= overload, which the backend then needs; without a CPU kernel beside it, it is
    # a decomposition (select_backward: zeros and a copy).
    return not has(name, "CompositeExplicitAutogradNonFunctional") or has(name, "CPU")


@functools.lru_cache(maxsize=4)
def with_functional_twins(ops: frozenset[str]) -> frozenset[str]:
    """`ops` and the functional overload of each out= one in it: a structured operator
    listed as `add.out` serves `add.Tensor` too."""
    twins = {npu_ops.functional_name(name) for name in ops if name.startswith("aten::")}
    return ops | frozenset(name for name in twins if name)


def findings(recording: Recording, context: Context) -> list[Finding]:
    listed = with_functional_twins(context.npu_ops)
    out = []
    for (name, site), calls in recording.ops.items():
        if not reaches_backend(name):
            continue
        if npu_ops.is_listed(CPU_ONLY.get(name, name), listed):
            continue
        out.append(
            Finding(
                KIND,
                name,
                site[0],
                site[1],
                list(calls.stack),
                calls.count,
                f"{name} is not implemented by torch_npu {context.torch_npu}"
                + (f" ({HINTS[name]})" if name in HINTS else ""),
                calls.via,
            )
        )
    return out

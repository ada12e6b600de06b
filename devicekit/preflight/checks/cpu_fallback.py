"""`cpu-fallback`: operators the pinned torch_npu does not implement, which run on the CPU
there with a copy each way (torch_npu warns "not currently supported on the NPU backend").

No false alarms: an operator counts only when a device backend receives it. Composite
operators decompose into others first; the CPU picks CPU-only kernels where an NPU
receives the operator before that choice (mapped back here); profiler bookkeeping is not
compute; operators of other namespaces (c10d collectives, user extensions) are not aten's.
"""

from typing import List

import torch

from devicekit.preflight import npu_ops
from devicekit.preflight.checks import Context, Finding

KIND = "cpu-fallback"
ADVICE = ("torch_npu runs these on the CPU, copying tensors each way: use an equivalent "
          "listed operator, or move the call out of the step")

# What the CPU picks -> what an NPU receives in its place (the latter listed).
CPU_ONLY = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward":
        "aten::scaled_dot_product_attention",
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
_DECOMPOSED = ("CompositeImplicitAutograd", "CompositeExplicitAutograd",
               "CompositeExplicitAutogradNonFunctional")


def reaches_backend(name: str) -> bool:
    """Whether a device backend itself receives operator `name`, rather than what it
    decomposes into."""
    if not name.startswith("aten::") or name.startswith("aten::_record_function"):
        return False
    return not any(torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
                   for key in _DECOMPOSED)


def findings(recording, context: Context) -> List[Finding]:
    out = []
    for (name, site), calls in recording.ops.items():
        if not reaches_backend(name):
            continue
        name_on_npu = CPU_ONLY.get(name, name)
        if npu_ops.is_listed(name_on_npu, context.npu_ops):
            continue
        out.append(Finding(KIND, name, site[0], site[1], list(calls.stack), calls.count,
                           f"{name} is not implemented by torch_npu {context.torch_npu}"))
    return out

"""Reported for a manual change, whole: a boolean expression that mixes a question
devicekit answers with a device property it does not (`torch.cuda.is_available() and
torch.cuda.get_device_capability()[0] >= 8`). Ported in part, it would ask CUDA on an NPU
machine; so the rewrites inside it are undone and the whole expression is one item.
(`torch.cuda.is_available() and torch.cuda.is_bf16_supported()` is ported whole: devicekit
answers both.)"""

import libcst as cst
import libcst.matchers as m

from devicekit.port import names
from devicekit.port.rule import Port

RULES = ()  # it rewrites nothing: it reports, and undoes the rewrites inside

_WHY_FIX = (
    "part of this question is a device property devicekit does not answer; ported "
    "in part, it would ask CUDA (or torch.npu) on the other devices",
    "ask devicekit the whole question: devicekit.is_bf16_supported() for bfloat16, "
    "or decide from devicekit.device_type() and read the property only on that device",
)


def _asks_a_property(port: Port, call: cst.Call) -> bool:
    for name in port.qualified(call.func):
        cuda = names.cuda_twin(name) or name
        if (
            cuda.startswith("torch.cuda.")
            and cuda[len("torch.cuda.") :] not in names.DEVICEKIT_FUNCTIONS
            and names.manual_reason(name) is not None
        ):
            return True
    return False


def leave_BooleanOperation(
    port: Port, original: cst.BooleanOperation, updated: cst.BooleanOperation
) -> cst.BooleanOperation | None:
    """is_available() and get_device_capability() >= (8, 0): left whole, reported."""
    if isinstance(port.parent(original), cst.BooleanOperation):
        return None  # the outermost one decides
    calls = m.findall(original, m.Call())
    if not any(
        _asks_a_property(port, c) for c in calls if isinstance(c, cst.Call)
    ) or updated.deep_equals(original):
        return None
    port.report(original, _WHY_FIX)
    return port.reverted(original)

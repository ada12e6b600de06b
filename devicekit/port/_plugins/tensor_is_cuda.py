"""Rule `tensor-is-cuda`: `x.is_cuda` (or torch_npu's `x.is_npu`) -> `devicekit.is_accelerator(
x.device)`.

Scripts test a tensor's device to decide what runs next (`if out.is_cuda:
torch.cuda.synchronize()`, `pin = not batch.is_cuda`). On an NPU `is_cuda` is false, so a
ported synchronize inside such a test never runs there and a timing measures launches,
not work. The question it asks is "is this tensor on the accelerator", which devicekit
answers on every kind. Left alone where it guards code for CUDA only, and where the script
sets the attribute itself (`self.is_cuda = torch.cuda.is_available()`: its own flag)."""

import libcst as cst

from devicekit.port.branches import guards_device_only_code
from devicekit.port.nodes import code, devicekit_call
from devicekit.port.rule import Port

RULES = ("tensor-is-cuda",)

_ATTRIBUTES = ("is_cuda", "is_npu")


def leave_Attribute(port: Port, original: cst.Attribute, updated: cst.Attribute) -> cst.Call | None:
    """x.is_cuda -> devicekit.is_accelerator(x.device)."""
    if (
        original.attr.value not in _ATTRIBUTES
        or any(name.startswith("torch.") for name in port.qualified(original))
        or code(original.value) in port.facts.own_device_flags
        or guards_device_only_code(port, original)
    ):
        return None
    device = cst.Attribute(value=updated.value, attr=cst.Name("device"))
    asked = devicekit_call("is_accelerator", cst.Arg(device))
    asked = asked.with_changes(lpar=updated.lpar, rpar=updated.rpar)
    return port.changed(original, "tensor-is-cuda", asked)

"""Rule `torch-cuda-api`: `torch.cuda.synchronize()` & co. -> `devicekit.synchronize()`
(names.DEVICEKIT_FUNCTIONS), called with the same arguments or referred to uncalled.
A `torch.cuda.device_count()` that sizes an `mp.spawn` becomes
`devicekit.default_ranks_per_node()` (ranks, not devices); arguments devicekit's function
does not take are reported for a manual change. A `torch.cuda.is_available()` that guards
code for CUDA only (`if torch.cuda.is_available(): torch.cuda.get_device_capability()`)
is kept: on an NPU it must stay false."""

import libcst as cst

from devicekit.port import names
from devicekit.port.branches import guards_device_only_code
from devicekit.port.nodes import NOT_DEVICE, parse_device_string
from devicekit.port.rule import Port

RULES = ("torch-cuda-api",)

_PREFIX = "torch.cuda."


def _is_torch_cuda_function(qualified: set[str]) -> bool:
    return any(
        q.startswith(_PREFIX) and q[len(_PREFIX) :] in names.DEVICEKIT_FUNCTIONS for q in qualified
    )


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    return _is_torch_cuda_function(qualified)


def on_call(port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]) -> cst.Call:
    """torch.cuda.synchronize() & co. -> devicekit.synchronize() (same arguments)."""
    short = next(q for q in qualified if q.startswith(_PREFIX))[len(_PREFIX) :]
    takes = names.DEVICEKIT_FUNCTIONS[short]
    if len(updated.args) > takes or any(a.keyword or a.star for a in updated.args):
        port.report(original, names.REASONS["arguments"])
        return updated
    if short == "is_available" and guards_device_only_code(port, original):
        port.keep(
            original,
            "kept: it guards code for that device only, which must not run on another accelerator",
        )
        return updated
    args = list(updated.args)
    if short == "set_device" and args:
        index = parse_device_string(args[0].value)
        if index is not NOT_DEVICE and index is not None:
            args[0] = args[0].with_changes(value=index)  # set_device(f"cuda:{i}")
    if short == "device_count" and id(original) in port.facts.spawn_counts:
        short = "default_ranks_per_node"  # it sizes an mp.spawn: ranks, not devices
    return port.changed(
        original,
        "torch-cuda-api",
        updated.with_changes(
            func=cst.Attribute(value=cst.Name("devicekit"), attr=cst.Name(short)), args=args
        ),
    )


def on_reference(
    port: Port, original: cst.BaseExpression, updated: cst.BaseExpression, name: str
) -> cst.Attribute | None:
    """An uncalled torch.cuda.synchronize (a callback, say) -> devicekit.synchronize."""
    short = name[len(_PREFIX) :]
    if (
        not name.startswith(_PREFIX)
        or short not in names.DEVICEKIT_FUNCTIONS
        or port.call_of(original) is not None
    ):
        return None  # the call is ported with its arguments
    return port.changed(
        original, "torch-cuda-api", cst.Attribute(value=cst.Name("devicekit"), attr=cst.Name(short))
    )

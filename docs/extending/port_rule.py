"""A worked example of a port rule, `barrier-device-ids`: `torch.distributed.barrier(
device_ids=[i])` passes its device ids only where there is an accelerator:
`device_ids=[i] if devicekit.is_available() else None`. `device_ids=` is NCCL's: older
torch releases (2.0 among them) refuse it with any other backend, so the ported script's
barrier would fail on a CPU (gloo), as DDP's `device_ids=` does (rule `ddp-device-ids`).

A rule is a module that satisfies the Rule Protocol (devicekit/port/rule.py): RULES, the
ids it reports (each named in its docstring), and the hooks it needs at module level, here
a call rule (`matches_call` and `on_call`). Its hooks receive `port`, a Port: what they may
ask of the pass (qualified names, the parent of a node, `changed` to record a rewrite,
`report` to leave one for a manual change, ...). To add this one to devicekit: this file
as devicekit/port/_plugins/barrier_device_ids.py, and one line, `barrier_device_ids,`, in
PLUGINS (devicekit/port/registry.py) before `manual`, which reports what no rule before it
ported. tests/test_port.py ports a script with this file in PLUGINS.
"""

import libcst as cst

from devicekit.port.nodes import bound_args
from devicekit.port.rule import Port

RULES = ("barrier-device-ids",)

# The qualified names of the call (libcst resolves `dist.barrier` through the imports).
_BARRIER = {"torch.distributed.barrier", "torch.distributed.distributed_c10d.barrier"}
_PARAMS = ("group", "async_op", "device_ids")  # barrier's positional parameters, in order


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    """Whether the call is torch.distributed's barrier."""
    return bool(qualified & _BARRIER)


def on_call(
    port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """barrier(device_ids=[i]) -> barrier(device_ids=[i] if devicekit.is_available() else
    None); None (nothing to port) without device ids."""
    device_ids = bound_args(updated, _PARAMS).get("device_ids")
    result = port.accelerator_only(updated, {"device_ids": device_ids})
    if result is updated:
        return None
    return port.changed(original, "barrier-device-ids", result)

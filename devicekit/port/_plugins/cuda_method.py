"""Rule `cuda-method`: `x.cuda()`, `x.cuda(i)`, `x.cuda(i, non_blocking=True)`, and
Ascend's `x.npu()` & co. -> `x.to(devicekit.device(i), non_blocking=True)`. A
`.cuda(*args)` whose arguments cannot be read is reported for a manual change."""

import libcst as cst
import libcst.matchers as m

from devicekit.port import names
from devicekit.port.nodes import NOT_DEVICE, bound_args, device_call, keyword, parse_device_string
from devicekit.port.rule import Port

RULES = ("cuda-method",)


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    return method in ("cuda", "npu") and not qualified & {"torch.cuda", "torch.npu"}


def on_call(port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]) -> cst.Call:
    """x.cuda(), x.cuda(i), x.cuda(i, non_blocking=True) -> x.to(devicekit.device(i), ...)."""
    bound = bound_args(updated, ("device", "non_blocking", "memory_format"))
    if len(bound) != len(updated.args):
        port.report(original, names.REASONS["cuda-args"])
        return updated
    index = bound.get("device")
    parsed = NOT_DEVICE if index is None else parse_device_string(index.value)
    target: cst.BaseExpression
    if index is None or m.matches(index.value, m.Name("None")):
        target = device_call(None)
    elif parsed is not NOT_DEVICE:
        target = device_call(parsed)  # x.cuda("cuda:1")
    elif port.facts.holds_device(index.value):
        target = index.value  # x.cuda(device) with device = torch.device(...)
    else:
        target = device_call(index.value)
    rest = [
        keyword(name, bound[name].value)
        if bound[name].keyword is None
        else bound[name].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        for name in ("non_blocking", "memory_format")
        if name in bound
    ]
    args = [cst.Arg(target)] + rest
    args = [
        a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        for a in args[:-1]
    ] + args[-1:]
    spacing = {} if updated.args else {"whitespace_before_args": cst.SimpleWhitespace("")}
    return port.changed(
        original,
        "cuda-method",
        updated.with_changes(
            func=updated.func.with_changes(attr=cst.Name("to")), args=args, **spacing
        ),
    )

"""Rule `accelerator-branch`: a comparison with an accelerator's name asks "is this device
an accelerator?", and follows devicekit's answer:

- `"cuda" in device`, `device.startswith("cuda")` (or `"cuda:"`) ->
  `devicekit.is_accelerator(device)` (`not ...` for `not in`);
- `device.type in ("cuda",)` (a tuple, list or set of device types) -> `device.type in
  (devicekit.accelerator_type(),)`: timm keeps its fp16 loss scaler for the types so
  listed, and left as written an NPU trains fp16 with no loss scaling;
- `device_type == "cuda"`, `device.type != "cuda"` -> `device_type ==
  devicekit.accelerator_type()` ("cuda" on a GPU, "npu" on an NPU, None on a CPU), so
  that it answers on a GPU exactly as before (`"cuda:0" == "cuda"` stays false).

Left as written, `device_type = "cuda" if "cuda" in device else "cpu"` is "cpu" on an
NPU: autocast then wraps NPU tensors and does nothing, the synchronize before a timer is
skipped, fused AdamW is not used.

Left alone: a comparison with devicekit's own answer (`devicekit.device_type() == "npu"`);
one that guards code for that device only (`if device.type == "cuda": torch.cuda.Event(...)`,
kept there too), which must not run on another accelerator; `==`/`!=` in a script that
compares with both "cuda" and "npu" (it tells the devices apart, and its device value is
ported). A comparison with a backend name (`backend == "nccl"`), an indexed device
(`device == "cuda:0"`) or in a chain is reported for a manual change: what it asks cannot
be read from it alone.
"""

import libcst as cst
import libcst.matchers as m

from devicekit.port.branches import (
    guards_device_only_code,
    is_accelerator_name,
    lists_an_accelerator,
)
from devicekit.port.nodes import ACCELERATOR_TYPES, BACKENDS, devicekit_call, string_value
from devicekit.port.rule import Port

RULES = ("accelerator-branch",)
_RULE = RULES[0]
_INDEXED = tuple(f"{kind}:" for kind in ACCELERATOR_TYPES)  # `device.startswith("cuda:")`
_MANUAL = (
    "a comparison with a backend or an indexed device name: what it asks cannot be read from it",
    'write devicekit.is_accelerator(device) for "is this an '
    'accelerator?", or compare with devicekit.backend() / devicekit.device(i)',
)


def _names_a_device(node: cst.CSTNode) -> bool:
    text = string_value(node)
    return text is not None and (text in BACKENDS or text.split(":")[0] in ACCELERATOR_TYPES)


def _asks_devicekit(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and m.matches(
        node.func, m.Attribute(value=m.Name("devicekit"))
    )


def _asks(value: cst.BaseExpression, negated: bool, like: cst.BaseExpression) -> cst.BaseExpression:
    """`devicekit.is_accelerator(value)` (negated: `not ...`), with `like`'s parentheses."""
    asked: cst.BaseExpression = devicekit_call("is_accelerator", cst.Arg(value))
    if negated:
        asked = cst.UnaryOperation(operator=cst.Not(), expression=asked)
    return asked.with_changes(lpar=like.lpar, rpar=like.rpar)


def leave_Comparison(
    port: Port, original: cst.Comparison, updated: cst.Comparison
) -> cst.BaseExpression | None:
    """A comparison with a device name, then a membership in a list of device types."""
    ported = _comparison(port, original, updated)
    return _membership(port, original, updated) if ported is None else ported


def _comparison(
    port: Port, original: cst.Comparison, updated: cst.Comparison
) -> cst.BaseExpression | None:
    """ "cuda" in device -> devicekit.is_accelerator(device); device_type == "cuda" ->
    device_type == devicekit.accelerator_type()."""
    operands = [original.left] + [c.comparator for c in original.comparisons]
    if (
        not any(map(_names_a_device, operands))
        or any(map(_asks_devicekit, operands))
        or guards_device_only_code(port, original)
    ):
        return None
    if len(original.comparisons) == 1:
        operator = original.comparisons[0].operator
        left, right = updated.left, updated.comparisons[0].comparator
        if isinstance(operator, (cst.Equal, cst.NotEqual)) and is_accelerator_name(
            left
        ) != is_accelerator_name(right):
            if len(port.facts.compared_kinds) > 1:
                return None  # `== "npu"` beside `== "cuda"`: the script tells them apart
            answer = devicekit_call("accelerator_type")
            if is_accelerator_name(left):
                return port.changed(original, _RULE, updated.with_changes(left=answer))
            return port.changed(
                original,
                _RULE,
                updated.with_changes(
                    comparisons=[updated.comparisons[0].with_changes(comparator=answer)]
                ),
            )
        if isinstance(operator, (cst.In, cst.NotIn)) and is_accelerator_name(left):
            return port.changed(
                original, _RULE, _asks(right, isinstance(operator, cst.NotIn), original)
            )
    port.report(original, _MANUAL)
    return None


def _membership(
    port: Port, original: cst.Comparison, updated: cst.Comparison
) -> cst.Comparison | None:
    """device.type in ("cuda",) -> device.type in (devicekit.accelerator_type(),)."""
    if len(original.comparisons) != 1 or guards_device_only_code(port, original):
        return None
    target = updated.comparisons[0]
    kinds = target.comparator
    if not (isinstance(target.operator, (cst.In, cst.NotIn)) and lists_an_accelerator(kinds)):
        return None
    answer = devicekit_call("accelerator_type")
    elements: list[cst.BaseElement] = []
    for element in kinds.elements:
        if isinstance(element, cst.Element) and is_accelerator_name(element.value):
            if any(e.value is answer for e in elements):
                continue  # ("cuda", "npu"): one answer stands for both
            element = element.with_changes(value=answer)
        elements.append(element)
    if len(elements) == 1 and isinstance(kinds, cst.Tuple):
        elements[0] = elements[0].with_changes(comma=cst.Comma())
    else:
        elements[-1] = elements[-1].with_changes(comma=kinds.elements[-1].comma)
    ported = kinds.with_changes(elements=elements)
    return port.changed(
        original, _RULE, updated.with_changes(comparisons=[target.with_changes(comparator=ported)])
    )


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    return method == "startswith"


def on_call(
    port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.BaseExpression | None:
    """device.startswith("cuda") -> devicekit.is_accelerator(device)."""
    if (
        not isinstance(updated.func, cst.Attribute)
        or len(updated.args) != 1
        or updated.args[0].keyword is not None
        or string_value(updated.args[0].value) not in (*ACCELERATOR_TYPES, *_INDEXED)
    ):
        return None
    return port.changed(original, _RULE, _asks(updated.func.value, False, original))

"""Small libcst helpers: build devicekit calls, read and edit call arguments, recognise
accelerator device strings ("cuda", "npu:0", f"cuda:{i}", "npu:%d" % i,
"cuda:{}".format(i)) and collective backend names ("nccl", "hccl")."""

import enum
from collections.abc import Sequence
from typing import Final, TypeGuard

import libcst as cst
import libcst.matchers as m

_EMPTY = cst.Module(body=[])


class _NotDevice(enum.Enum):
    """parse_device_string's answer for "not a device string": the one member of an enum,
    so that `is not NOT_DEVICE` tells a type checker what is left."""

    NOT_DEVICE = enum.auto()


NOT_DEVICE: Final = _NotDevice.NOT_DEVICE
ACCELERATOR_TYPES = ("cuda", "npu")  # the device types a device string is ported from
_PREFIXES = tuple(f"{kind}:" for kind in ACCELERATOR_TYPES)  # "cuda:", "npu:"
BACKENDS = ("nccl", "hccl")  # their collective backends


def code(node: cst.CSTNode) -> str:
    """The source text of `node`."""
    return _EMPTY.code_for_node(node)


def devicekit_call(name: str, *args: cst.Arg) -> cst.Call:
    """`devicekit.<name>(args...)`."""
    return cst.Call(
        func=cst.Attribute(value=cst.Name("devicekit"), attr=cst.Name(name)),
        args=_with_commas(list(args)),
    )


def device_call(index: cst.BaseExpression | None) -> cst.Call:
    """`devicekit.device()` or `devicekit.device(index)`."""
    return devicekit_call("device", *([cst.Arg(index)] if index is not None else []))


def device_str(index: cst.BaseExpression | None) -> cst.BaseExpression:
    """The string form of a device: `devicekit.device_type()` ("cuda" on a GPU) or
    `str(devicekit.device(i))` ("cuda:i" on a GPU)."""
    if index is None:
        return devicekit_call("device_type")
    return cst.Call(func=cst.Name("str"), args=[cst.Arg(device_call(index))])


def is_devicekit_call(node: cst.CSTNode, name: str) -> TypeGuard[cst.Call]:
    """Whether `node` is `devicekit.<name>(...)`."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and isinstance(node.func.value, cst.Name)
        and node.func.value.value == "devicekit"
        and node.func.attr.value == name
    )


def keyword(name: str, value: cst.BaseExpression) -> cst.Arg:
    """`name=value`, formatted as PEP 8 formats keyword arguments."""
    return cst.Arg(
        value=value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
        ),
    )


def _with_commas(args: list[cst.Arg]) -> list[cst.Arg]:
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    return [arg.with_changes(comma=comma) for arg in args[:-1]] + args[-1:]


def bound_args(call: cst.Call, params: Sequence[str]) -> dict[str, cst.Arg]:
    """{parameter name: Arg} for `call`'s plain positional and keyword arguments (a call
    with *args or **kwargs gives {})."""
    found: dict[str, cst.Arg] = {}
    for position, arg in enumerate(call.args):
        if arg.star:
            return {}
        if arg.keyword is not None:
            found[arg.keyword.value] = arg
        elif position < len(params):
            found[params[position]] = arg
    return found


def string_value(node: cst.CSTNode) -> str | None:
    """The value of a plain string literal, else None."""
    if isinstance(node, cst.SimpleString) and "b" not in node.prefix.lower():
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def is_backend_name(node: cst.CSTNode) -> bool:
    """Whether `node` is the string "nccl" or "hccl"."""
    return string_value(node) in BACKENDS


def parse_device_string(node: cst.CSTNode) -> cst.BaseExpression | _NotDevice | None:
    """For an accelerator device string: None ("cuda", "npu": no index) or the index
    expression ("cuda:1", f"npu:{i}", "cuda:%d" % i, "npu:{}".format(i), "cuda:" + str(i));
    NOT_DEVICE for anything else."""
    text = string_value(node)
    if text is not None:
        kind, colon, index = text.partition(":")
        if kind in ACCELERATOR_TYPES and not colon:
            return None
        if kind in ACCELERATOR_TYPES and index.isdigit():
            return cst.Integer(index)
        return NOT_DEVICE
    if isinstance(node, cst.FormattedString) and "b" not in node.prefix.lower():
        return _formatted_index(node.parts)
    if isinstance(node, cst.BinaryOperation):
        left = string_value(node.left)
        if isinstance(node.operator, cst.Modulo) and left in {
            prefix + spec for prefix in _PREFIXES for spec in ("%d", "%s", "%i")
        }:
            right = node.right
            if isinstance(right, cst.Tuple) and len(right.elements) == 1:
                right = right.elements[0].value
            return right
        if (
            isinstance(node.operator, cst.Add)
            and left in _PREFIXES
            and isinstance(node.right, cst.Call)
            and isinstance(node.right.func, cst.Name)
            and node.right.func.value == "str"
            and len(node.right.args) == 1
        ):
            return node.right.args[0].value
        return NOT_DEVICE
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "format"
        and string_value(node.func.value) in {p + f for p in _PREFIXES for f in ("{}", "{0}")}
        and len(node.args) == 1
        and node.args[0].keyword is None
        and not node.args[0].star
    ):
        return node.args[0].value
    return NOT_DEVICE


def _formatted_index(
    parts: Sequence[cst.BaseFormattedStringContent],
) -> cst.BaseExpression | _NotDevice | None:
    texts = [p for p in parts if isinstance(p, cst.FormattedStringText)]
    expressions = [p for p in parts if isinstance(p, cst.FormattedStringExpression)]
    if not expressions:
        return None if "".join(t.value for t in texts) in ACCELERATOR_TYPES else NOT_DEVICE
    if (
        len(parts) == 2
        and texts
        and parts[0] is texts[0]
        and texts[0].value in _PREFIXES
        and expressions[0].conversion is None
        and expressions[0].format_spec is None
    ):
        return expressions[0].expression
    return NOT_DEVICE


def replace_arg_value(call: cst.Call, old: cst.Arg, value: cst.BaseExpression) -> cst.Call:
    """`call` with argument `old`'s value replaced (keyword and formatting kept)."""
    return call.with_changes(
        args=[arg.with_changes(value=value) if arg is old else arg for arg in call.args]
    )


def without_args(call: cst.Call, removed: Sequence[cst.Arg]) -> cst.Call:
    """`call` without the arguments `removed`; the new last argument takes the old last
    one's comma, so the layout (one per line, trailing comma) stays."""
    kept = [arg for arg in call.args if all(arg is not r for r in removed)]
    if kept and call.args and all(call.args[-1] is not k for k in kept):
        kept[-1] = kept[-1].with_changes(comma=call.args[-1].comma)
    return call.with_changes(args=kept)


def with_arg_after(call: cst.Call, anchor: cst.Arg, new: cst.Arg) -> cst.Call:
    """`call` with `new` inserted right after `anchor`, on the same line: `new` takes
    the anchor's comma (and the line break after it, if any)."""
    args = []
    for arg in call.args:
        if arg is anchor:
            args.append(
                arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            )
            args.append(new.with_changes(comma=arg.comma))
        else:
            args.append(arg)
    return call.with_changes(args=args)


# `devicekit.device_type() == "npu"`: the guard the port writes around NPU-only code
DEVICE_TYPE_GUARD = m.Comparison(
    left=m.Call(func=m.Attribute(value=m.Name("devicekit"), attr=m.Name("device_type"))),
    comparisons=[m.ComparisonTarget(operator=m.Equal(), comparator=m.SimpleString())],
)

"""Rule `master-env-setdefault`: `os.environ["MASTER_ADDR"] = "localhost"` ->
`os.environ.setdefault("MASTER_ADDR", "localhost")` (and MASTER_PORT): a launcher that
sets the rendezvous address (torchrun) keeps it; the script's value remains the default."""

import libcst as cst

from devicekit.port.nodes import code, string_value
from devicekit.port.rule import Port

RULES = ("master-env-setdefault",)

_OS_ENVIRON = "os.environ"
_LAUNCHER_OWNED = ("MASTER_ADDR", "MASTER_PORT")


def _item(node: cst.Assign) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(mapping, key) for `mapping[key] = value`, else None."""
    if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Subscript):
        return None
    target = node.targets[0].target
    if len(target.slice) != 1 or not isinstance(target.slice[0].slice, cst.Index):
        return None
    return target.value, target.slice[0].slice.value


def _launcher_variable(port: Port, node: cst.Assign) -> str | None:
    """ "MASTER_ADDR"/"MASTER_PORT" for `os.environ[...] = value`, else None."""
    item = _item(node)
    if item is None:
        return None
    mapping, key = item
    if _OS_ENVIRON not in port.qualified(mapping) and code(mapping) != _OS_ENVIRON:
        return None
    variable = string_value(key)
    return variable if variable in _LAUNCHER_OWNED else None


def leave_Assign(port: Port, original: cst.Assign, updated: cst.Assign) -> cst.Expr | None:
    """os.environ["MASTER_PORT"] = value -> os.environ.setdefault("MASTER_PORT", value)."""
    item = _item(updated)
    if _launcher_variable(port, original) is None or item is None:
        return None
    mapping, key = item
    setdefault = cst.Call(
        func=cst.Attribute(value=mapping, attr=cst.Name("setdefault")),
        args=[
            cst.Arg(
                key,
                comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
            ),
            cst.Arg(updated.value),
        ],
    )
    return port.changed(
        original, "master-env-setdefault", cst.Expr(setdefault, semicolon=updated.semicolon)
    )

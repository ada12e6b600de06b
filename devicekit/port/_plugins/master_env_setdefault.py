"""Rule `master-env-setdefault`: `os.environ["MASTER_ADDR"] = "localhost"` ->
`os.environ.setdefault("MASTER_ADDR", "localhost")` (and MASTER_PORT): a launcher that
sets the rendezvous address (torchrun) keeps it; the script's value remains the default."""

from typing import TYPE_CHECKING

import libcst as cst

from devicekit.port import names
from devicekit.port._plugins import leave
from devicekit.port.nodes import code, string_value

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer


def _launcher_variable(port: "PortTransformer", node: cst.Assign) -> str | None:
    """ "MASTER_ADDR"/"MASTER_PORT" for `os.environ[...] = value`, else None."""
    if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Subscript):
        return None
    target = node.targets[0].target
    environ = (
        names.OS_ENVIRON in port.qualified(target.value) or code(target.value) == names.OS_ENVIRON
    )
    if not environ or len(target.slice) != 1 or not isinstance(target.slice[0].slice, cst.Index):
        return None
    key = string_value(target.slice[0].slice.value)
    return key if key in names.LAUNCHER_OWNED else None


@leave(cst.Assign)
def master_env_setdefault(
    port: "PortTransformer", original: cst.Assign, updated: cst.Assign
) -> cst.Expr | None:
    """os.environ["MASTER_PORT"] = value -> os.environ.setdefault("MASTER_PORT", value)."""
    if _launcher_variable(port, original) is None:
        return None
    target = updated.targets[0].target
    setdefault = cst.Call(
        func=cst.Attribute(value=target.value, attr=cst.Name("setdefault")),
        args=[
            cst.Arg(
                target.slice[0].slice.value,
                comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
            ),
            cst.Arg(updated.value),
        ],
    )
    return port.changed(
        original, "master-env-setdefault", cst.Expr(setdefault, semicolon=updated.semicolon)
    )

"""Rule `out-of-memory-error`: `torch.cuda.OutOfMemoryError` -> `torch.OutOfMemoryError`,
which every device raises. Spelled otherwise (imported under its own name, say), it is
reported for a manual change (see manual)."""

import libcst as cst
import libcst.matchers as m

from devicekit.port import names
from devicekit.port.rule import Port

RULES = ("out-of-memory-error",)


def on_reference(
    port: Port, original: cst.BaseExpression, updated: cst.BaseExpression, name: str
) -> cst.Attribute | None:
    """torch.cuda.OutOfMemoryError -> torch.OutOfMemoryError."""
    if (
        name != names.OUT_OF_MEMORY
        or not isinstance(updated, cst.Attribute)
        or not m.matches(updated.value, m.Attribute(value=m.Name("torch")))
    ):
        return None
    return port.changed(
        original, "out-of-memory-error", updated.with_changes(value=cst.Name("torch"))
    )

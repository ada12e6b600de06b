"""Kept as harmless (reported as information, never changed): torch.backends.cudnn and
torch.backends.cuda settings (`cudnn.benchmark = True`, TF32), ignored where there is no
cuDNN or CUDA (names.HARMLESS). Nothing else is kept: what is the same on every device
needs no note, and what is not is ported or reported for a manual change.
"""

from typing import TYPE_CHECKING

import libcst as cst

from devicekit.port import names
from devicekit.port._plugins import reference

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer


@reference
def backend_setting(
    port: "PortTransformer", original: cst.BaseExpression, updated: cst.BaseExpression, name: str
) -> None:
    """torch.backends.cudnn.benchmark = True: kept, noted on its statement."""
    note = names.harmless_note(name)
    if note:
        port.keep(port.statement_of(original), f"kept, harmless: {note}")

"""Kept as harmless (reported as information, never changed): torch.backends.cudnn and
torch.backends.cuda settings (`cudnn.benchmark = True`, TF32), ignored where there is no
cuDNN or CUDA (_HARMLESS). Nothing else is kept: what is the same on every device
needs no note, and what is not is ported or reported for a manual change.
"""

import libcst as cst

from devicekit.port import names
from devicekit.port.rule import Port

RULES = ()  # it rewrites nothing: it notes what it keeps

# Kept on purpose and reported as information.
_HARMLESS = {
    "torch.backends.cudnn": "cuDNN settings: ignored where there is no cuDNN",
    "torch.backends.cuda": "CUDA backend settings (TF32, SDPA kernels): ignored off CUDA",
}


def _harmless_note(qualified: str) -> str | None:
    """Why a kept torch.backends.* setting is harmless, or None."""
    if names.manual_reason(qualified) is not None:
        return None  # the SDPA switches act on every device
    for prefix, note in _HARMLESS.items():
        if qualified == prefix or qualified.startswith(prefix + "."):
            return note
    return None


def on_reference(
    port: Port, original: cst.BaseExpression, updated: cst.BaseExpression, name: str
) -> None:
    """torch.backends.cudnn.benchmark = True: kept, noted on its statement."""
    note = _harmless_note(name)
    if note:
        port.keep(port.statement_of(original), f"kept, harmless: {note}")

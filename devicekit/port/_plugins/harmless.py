"""Kept as harmless (reported as information, never changed):

- torch.backends.cudnn / torch.backends.cuda settings (`cudnn.benchmark = True`, TF32):
  ignored where there is no cuDNN or CUDA (names.HARMLESS);
- a comparison with a CUDA name (`if device == "cuda":`, `backend == "nccl"`): simply
  false on other devices; the reader checks the branch it guards.
"""

from typing import TYPE_CHECKING, Optional

import libcst as cst

from devicekit.port import names
from devicekit.port._plugins import leave, reference
from devicekit.port.nodes import NOT_DEVICE, parse_device_string, string_value

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer


@reference
def backend_setting(port: "PortTransformer", original: cst.BaseExpression,
                    updated: cst.BaseExpression, name: str) -> None:
    """torch.backends.cudnn.benchmark = True: kept, noted on its statement."""
    note = names.harmless_note(name)
    if note:
        port.keep(port.statement_of(original), f"kept, harmless: {note}")


@leave(cst.Comparison)
def cuda_comparison(port: "PortTransformer", original: cst.Comparison,
                    updated: cst.Comparison) -> Optional[cst.Comparison]:
    """device == "cuda": kept, noted."""
    operands = [original.left] + [c.comparator for c in original.comparisons]
    if any(parse_device_string(o) is not NOT_DEVICE or string_value(o) == "nccl"
           for o in operands):
        port.keep(original, "a comparison with a CUDA name is kept: it is simply "
                            "false on other devices; check the branch it guards")
    return None

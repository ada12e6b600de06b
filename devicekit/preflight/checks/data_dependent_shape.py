"""`data-dependent-shape`: operators whose output size depends on the values (nonzero,
boolean-mask indexing, masked_select, unique): the device must finish and report the
size to the host before anything after them can be compiled or launched."""

from devicekit.preflight.checks.base import Context, Finding
from devicekit.preflight.checks.tables import from_table
from devicekit.preflight.recording import Calls, Recording

KIND = "data-dependent-shape"
ADVICE = (
    "keep shapes fixed: torch.where(mask, x, 0) or multiplying by the mask instead of "
    "x[mask]; a fixed-size result instead of nonzero/unique"
)


def findings(recording: Recording, context: Context) -> list[Finding]:
    return from_table(KIND, recording.data_dependent, detail)


def detail(op: str, calls: Calls) -> str:
    """What a data-dependent finding says of operator `op`."""
    return f"{op}: its output size depends on the data"

"""A worked example of a preflight check: `nondeterministic`, the operators that add into a
tensor at indices (index_add, scatter_add), which a device runs with atomic adds: the order
of the additions, and so the last bits of the sums, differ from run to run, so two runs of
the same seed drift apart.

A check is a module that satisfies the Check Protocol (devicekit/preflight/checks/base.py):
KIND, ADVICE and findings() at module level; KEEP_ORDER and HOST_SIDE are left out, so its
findings are shown most frequent first, with the device's. To add this one to devicekit:
this file as devicekit/preflight/checks/nondeterministic.py, and one line,
`nondeterministic,`, in CHECKS (devicekit/preflight/checks/__init__.py) just after
`float64` (and its name in the import above it): the report keeps that order, most costly
first. tests/test_preflight.py runs preflight with this file at that place.
"""

from devicekit.preflight.checks.base import Context, Finding
from devicekit.preflight.checks.tables import from_table
from devicekit.preflight.recording import Calls, Recording

KIND = "nondeterministic"  # the finding's kind, as the report and its JSON name it
ADVICE = (  # one line: what to do
    "where two runs must agree bit for bit, call torch.use_deterministic_algorithms(True) "
    "(slower), or gather and sum in a fixed order; otherwise the drift is rounding only"
)

# The operators as the recording names them: aten's name and, but for the default, overload.
_ATOMIC_ADDS = frozenset(
    {"aten::index_add", "aten::index_add_", "aten::scatter_add", "aten::scatter_add_"}
)


def _detail(op: str, calls: Calls) -> str:
    return f"{op}: adds at indices with atomic adds on the device, in no fixed order"


def findings(recording: Recording, context: Context) -> list[Finding]:
    """A finding per user's line that ran one of the operators on the device's tensors."""
    table = {key: calls for key, calls in recording.ops.items() if key[0] in _ATOMIC_ADDS}
    return from_table(KIND, table, _detail)

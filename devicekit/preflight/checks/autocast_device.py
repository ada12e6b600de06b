"""`autocast-device`: an autocast region opened for one device type around tensors of
another (`torch.autocast("cuda")` around NPU or CPU tensors): it does nothing, and the
step silently runs in float32."""

from devicekit.preflight.checks.base import Context, Finding
from devicekit.preflight.checks.tables import from_table
from devicekit.preflight.recording import Calls, Recording

KIND = "autocast-device"
ADVICE = "open autocast for the tensors' device: devicekit.autocast() picks it"


def _detail(what: str, calls: Calls) -> str:
    wanted, _, found = what.partition(":")
    return (
        f'autocast("{wanted}") around {found} tensors: no effect, the ops run in '
        f"float32 ({calls.count} ops)"
    )


def findings(recording: Recording, context: Context) -> list[Finding]:
    return from_table(KIND, recording.autocast, _detail)

"""`float64`: tensors created or computed on in double precision, which the NPU's compute
cores do not run (torch_npu computes them slowly or casts them)."""

from devicekit.preflight.checks.base import Context, Finding
from devicekit.preflight.checks.tables import from_table
from devicekit.preflight.recording import Recording

KIND = "float64"
ADVICE = (
    "create and compute in float32 (a float64 numpy array becomes a float64 tensor: "
    "torch.from_numpy(a).float(), or torch.tensor(..., dtype=torch.float32))"
)


def findings(recording: Recording, context: Context) -> list[Finding]:
    return from_table(KIND, recording.float64, lambda op, calls: f"{op} on float64 tensors")

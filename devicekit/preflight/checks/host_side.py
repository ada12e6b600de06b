"""`host-side`: the shape findings (a new shape in a later step, a data-dependent size)
of operators on tensors preflight did not see reach the device: not computed from the
model's parameters, not moved with `.to(device)`, not inside a DataLoader's iteration
(whose work is the host's and is not reported at all). Data generated or transformed on
the host never compiles on the NPU, so these are kept apart from the device's findings;
where such a tensor does go to the device, the device's own lines that use it are found
as dynamic-shape findings.
"""

from devicekit.preflight.checks import data_dependent_shape
from devicekit.preflight.checks.base import Context, Finding
from devicekit.preflight.checks.dynamic_shape import varying
from devicekit.preflight.checks.tables import from_table
from devicekit.preflight.recording import Recording

KIND = "host-side"
HOST_SIDE = True
ADVICE = (
    "nothing, where these tensors stay on the host (host work never compiles on the NPU); "
    "--npu-stand-in places every operator by the device its tensors are on"
)


def findings(recording: Recording, context: Context) -> list[Finding]:
    return varying(KIND, recording.host_side_shapes, recording) + from_table(
        KIND, recording.host_side_data_dependent, data_dependent_shape.detail
    )

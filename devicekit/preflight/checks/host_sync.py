"""`host-sync`: reading a tensor's value on the host (`.item()`, `.tolist()`, printing a
tensor) or waiting for the device (`synchronize()`) inside the step: on an NPU each waits
for all queued device work."""

from devicekit.preflight.checks.base import Context, Finding
from devicekit.preflight.recording import Recording

KIND = "host-sync"
ADVICE = (
    "keep values on the device inside the step (accumulate a tensor, read it every N "
    "steps or after the epoch); synchronize only where a timing needs it, every N steps"
)


def findings(recording: Recording, context: Context) -> list[Finding]:
    steps = max(recording.steps, 1)
    out = []
    for (what, site), calls in recording.host_reads.items():
        in_steps = len(calls.steps)
        if recording.steps >= 2 and in_steps < 2:
            continue  # once, before or after the training loop: not per step
        out.append(
            Finding(
                KIND,
                what,
                site[0],
                site[1],
                list(calls.stack),
                calls.count,
                f"{what}: {calls.count} {'calls' if what == 'synchronize()' else 'reads'} in "
                f"{in_steps} of {steps + 1} step "
                f"periods ({calls.count / steps:.1f} per step)",
                calls.via,
            )
        )
    return out

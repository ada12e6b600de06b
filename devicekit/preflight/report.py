"""The preflight report: JSON, and text grouped by kind, most costly first."""

import os
from collections.abc import Sequence

from devicekit.preflight.checks import Check, Finding

SHOWN_PER_KIND = 12


def to_json(findings: list[Finding], torch_npu: str, steps: int) -> dict[str, object]:
    return {
        "torch_npu": torch_npu,
        "steps": steps,
        "findings": [finding.to_json() for finding in findings],
    }


def _where(finding: Finding) -> str:
    path = os.path.relpath(finding.file) if os.path.isabs(finding.file) else finding.file
    if path.startswith(".." + os.sep):
        path = finding.file
    return f"{path}:{finding.line}"


def text(
    findings: list[Finding], checks: Sequence[Check], torch_npu: str, steps: int, outcome: str
) -> str:
    kinds = [check for check in checks if any(f.kind == check.KIND for f in findings)]
    head = (
        f"devicekit preflight: {len(findings)} finding(s) in {len(kinds)} kind(s), checked "
        f"against torch_npu {torch_npu}; {steps} optimizer step(s) recorded ({outcome})"
    )
    lines = [head]
    for check in kinds:
        mine = [f for f in findings if f.kind == check.KIND]
        lines += ["", f"{check.KIND} ({len(mine)})"]
        width = max(len(_where(f)) for f in mine[:SHOWN_PER_KIND])
        for finding in mine[:SHOWN_PER_KIND]:
            lines.append(
                f"  {_where(finding):<{width}}  {finding.detail}"
                + (f"  (x{finding.count})" if finding.count > 1 else "")
            )
        if len(mine) > SHOWN_PER_KIND:
            lines.append(f"  ... and {len(mine) - SHOWN_PER_KIND} more (--json FILE lists all)")
        lines.append(f"  what to do: {check.ADVICE}")
    if not findings:
        ran = (
            "that ran before the script raised"
            if outcome.startswith("raised")
            else ("this script ran")
        )
        lines.append(
            f"nothing {ran} would fail, fall back to the CPU or recompile on the NPU in the "
            "ways preflight checks"
        )
    return "\n".join(lines)

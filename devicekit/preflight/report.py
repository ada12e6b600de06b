"""The preflight report: JSON, and text grouped by kind, most costly first; host-side
work (checks that set HOST_SIDE) apart from the device's findings, after them; and the
listed torch_npu operators the script names, as one line after the summary."""

import os
from collections.abc import Sequence

from devicekit.preflight.checks.base import Check, Finding, is_host_side
from devicekit.preflight.checks.npu_operators import Supported

SHOWN_PER_KIND = 12
SITES_SHOWN = 3  # per torch_npu operator on its line; --json FILE lists all
HOST_SIDE_HEADER = "apart from the device's findings: work on tensors not seen reaching the device"
VIA_NOTE = (
    "via: the installed library's line that ran it, reached from yours: change your call "
    "(its arguments, its options, or another function), not the library"
)


def _split(findings: list[Finding], checks: Sequence[Check]) -> tuple[list[Finding], list[Finding]]:
    """(the device's findings, the host-side ones)."""
    host_kinds = {check.KIND for check in checks if is_host_side(check)}
    return (
        [f for f in findings if f.kind not in host_kinds],
        [f for f in findings if f.kind in host_kinds],
    )


def to_json(
    findings: list[Finding],
    checks: Sequence[Check],
    torch_npu: str,
    steps: int,
    npu_operators: Sequence[Supported] = (),
) -> dict[str, object]:
    """The report as JSON: the device's findings, and the host-side ones apart; with
    `npu_operators` (only for a script that names listed torch_npu operators) those too."""
    device, host = _split(findings, checks)
    report: dict[str, object] = {
        "torch_npu": torch_npu,
        "steps": steps,
        "findings": [finding.to_json() for finding in device],
        "host_side": [finding.to_json() for finding in host],
    }
    if npu_operators:
        report["npu_operators"] = [operator.to_json() for operator in npu_operators]
    return report


def _at(file: str, line: int) -> str:
    path = os.path.relpath(file) if os.path.isabs(file) else file
    if path.startswith(".." + os.sep):
        path = file
    return f"{path}:{line}"


def _where(finding: Finding) -> str:
    return _at(finding.file, finding.line)


def _operators_line(npu_operators: Sequence[Supported], torch_npu: str) -> str:
    """The listed torch_npu operators the script names, at their first sites."""
    shown = []
    for operator in npu_operators:
        sites = [_at(f, line) + (f" x{n}" if n > 1 else "") for f, line, n in operator.sites]
        more = len(sites) - SITES_SHOWN
        sites = sites[:SITES_SHOWN] + ([f"+{more} more"] if more > 0 else [])
        shown.append(f"{operator.name} ({', '.join(sites)})")
    return (
        f"torch_npu operators it calls (each in torch_npu {torch_npu}; checked by name only: "
        "the npu stand-in runs PyTorch references of them, not their NPU kernels): "
        + ", ".join(shown)
    )


def _section(check: Check, mine: list[Finding]) -> list[str]:
    """The lines of one kind: its header, its findings, what to do."""
    header = f"{check.KIND} ({len(mine)})"
    lines = ["", f"{header}, {HOST_SIDE_HEADER}" if is_host_side(check) else header]
    shown = mine[:SHOWN_PER_KIND]
    width = max(len(_where(f)) for f in shown)
    for finding in shown:
        lines.append(
            f"  {_where(finding):<{width}}  {finding.detail}"
            + (f"  via {finding.via}" if finding.via else "")
            + (f"  (x{finding.count})" if finding.count > 1 else "")
        )
    if len(mine) > SHOWN_PER_KIND:
        lines.append(f"  ... and {len(mine) - SHOWN_PER_KIND} more (--json FILE lists all)")
    lines.append(f"  what to do: {check.ADVICE}")
    if any(finding.via for finding in shown):
        lines.append(f"  {VIA_NOTE}")
    return lines


def text(
    findings: list[Finding],
    checks: Sequence[Check],
    torch_npu: str,
    steps: int,
    outcome: str,
    npu_operators: Sequence[Supported] = (),
) -> str:
    """The report as text: a summary line of the device's findings, the line of the listed
    torch_npu operators the script names (if any), each kind's section, then the host-side
    sections."""
    device, _ = _split(findings, checks)
    kinds = [check for check in checks if any(f.kind == check.KIND for f in device)]
    head = (
        f"devicekit preflight: {len(device)} finding(s) in {len(kinds)} kind(s), checked "
        f"against torch_npu {torch_npu}; {steps} optimizer step(s) recorded ({outcome})"
    )
    lines = [head]
    if npu_operators:
        lines.append(_operators_line(npu_operators, torch_npu))
    host_side: list[str] = []
    for check in checks:
        mine = [f for f in findings if f.kind == check.KIND]
        if mine:
            (host_side if is_host_side(check) else lines).extend(_section(check, mine))
    if not device:
        ran = (
            "that ran before the script raised"
            if outcome.startswith("raised")
            else ("this script ran")
        )
        lines.append(
            f"nothing {ran} would fail, fall back to the CPU or recompile on the NPU in the "
            "ways preflight checks"
        )
    return "\n".join(lines + host_side)

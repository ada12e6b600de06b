"""One checker per kind of finding; each reads a Recording and returns Findings.

A checker is a module with KIND, ADVICE (one line: what to do) and `findings(recording,
context)`; its findings are shown most frequent first unless it sets KEEP_ORDER. One that
sets HOST_SIDE reports work preflight did not see reach the device: its findings are kept
apart from the device's, in the text report and in the JSON.
all_checks() lists them most costly first, the order the report keeps.
"""

import dataclasses
from collections.abc import Callable
from typing import Protocol

from devicekit.preflight.recording import Calls, Recording, Site


@dataclasses.dataclass
class Finding:
    """One thing the script will hit on an NPU, at the user's line."""

    kind: str
    op: str
    file: str
    line: int
    stack: list[str]
    count: int
    detail: str
    # The installed library's own line that ran it, where the user's line called a library
    # ("timm/utils/cuda.py:42"); "" where the user's line called torch itself.
    via: str = ""

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Context:
    """What a checker may need besides the recording."""

    npu_ops: frozenset[str]
    torch_npu: str  # the release the list is of
    scripts: list[str]  # the user's own files the run went through


def from_table(
    kind: str, table: dict[tuple[str, Site], Calls], detail: Callable[[str, Calls], str]
) -> list[Finding]:
    """A finding per (what, where) entry of a recording's table."""
    return [
        Finding(
            kind,
            what,
            site[0],
            site[1],
            list(calls.stack),
            calls.count,
            detail(what, calls),
            calls.via,
        )
        for (what, site), calls in table.items()
    ]


class Check(Protocol):
    """A checker module (KEEP_ORDER and HOST_SIDE, where set, are read with getattr)."""

    KIND: str
    ADVICE: str

    def findings(self, recording: Recording, context: Context) -> list[Finding]: ...


def is_host_side(check: Check) -> bool:
    """Whether `check` reports host-side work, apart from the device's findings."""
    return bool(getattr(check, "HOST_SIDE", False))


def all_checks() -> list[Check]:
    """The checker modules, most costly first."""
    from devicekit.preflight.checks import (
        autocast_device,
        cpu_fallback,
        cuda_only,
        data_dependent_shape,
        dynamic_shape,
        float64,
        host_side,
        host_sync,
        npu_operators,
        sparse_gradient,
    )

    return [
        sparse_gradient,
        npu_operators,
        cpu_fallback,
        dynamic_shape,
        host_sync,
        data_dependent_shape,
        float64,
        autocast_device,
        cuda_only,
        host_side,
    ]

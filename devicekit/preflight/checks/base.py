"""What a preflight check is: the Check Protocol, and the Finding and Context it deals in.
A check reads a Recording and returns Findings; CHECKS (checks/__init__.py) lists them."""

import dataclasses
from typing import Protocol

from devicekit.preflight.recording import Recording


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


class Check(Protocol):
    """A check module: KIND, the kind of its findings; ADVICE, one line saying what to do
    about them; findings(), those in a recording. Optional, read with getattr: KEEP_ORDER
    (true: its findings are shown in its own order, not most frequent first) and HOST_SIDE
    (true: they are work preflight did not see reach the device, kept apart from the
    device's, in the text report and in the JSON)."""

    KIND: str
    ADVICE: str

    def findings(self, recording: Recording, context: Context) -> list[Finding]: ...


def is_host_side(check: Check) -> bool:
    """Whether `check` reports host-side work, apart from the device's findings."""
    return bool(getattr(check, "HOST_SIDE", False))

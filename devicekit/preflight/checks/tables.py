"""Findings made from a recording's (what, where) tables: for the checks that report one
finding per entry."""

from collections.abc import Callable

from devicekit.preflight.checks.base import Finding
from devicekit.preflight.recording import Calls
from devicekit.preflight.sites import Site


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

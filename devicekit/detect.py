"""Choosing the device kind: explicit argument > DEVICEKIT_DEVICE > auto (npu > cuda > cpu)."""

import os

from devicekit import kinds
from devicekit.errors import warn

ENV_VAR = "DEVICEKIT_DEVICE"


def resolve_kind(requested=None, environ=None):
    """Return the DeviceKind to run on.

    `requested` is a kind name, an alias ("gpu") or "auto"/None. An explicit choice that
    cannot run here raises UsageError with the reason and the fix; auto picks the first
    usable kind in registry order and says so once when an installed NPU stack cannot load.
    """
    environ = os.environ if environ is None else environ
    choice = str(requested or "auto").lower()
    if choice == "auto":
        choice = environ.get(ENV_VAR, "auto").strip().lower()
    if choice not in ("", "auto"):
        kind = kinds.get(choice)
        kind.ensure_usable()
        return kind
    for name in kinds.names():
        kind = kinds.get(name)
        usable, reason = kind.probe()
        if usable:
            return kind
        if kind.worth_a_warning_when_skipped():
            warn(f"{reason.split(': ', 1)[1]} (auto-detection skipped {name})")
    raise AssertionError("the cpu kind is always usable")

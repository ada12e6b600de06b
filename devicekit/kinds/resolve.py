"""Resolving the device kind to run on: explicit argument > DEVICEKIT_DEVICE > auto (the kinds
registry's order: npu > cuda > xpu > kinds registered by the user > cpu)."""

import os
from collections.abc import Mapping

from devicekit import kinds
from devicekit.errors import UsageError, warn
from devicekit.kinds.base import DeviceKind

ENV_VAR = "DEVICEKIT_DEVICE"


def _label(source: str, choice: str | None) -> str:
    """How the choice reads where it was made: `--device npu`, `device_type='npu'`."""
    if source.startswith("--"):
        return f"{source} {choice}" if str(choice).isidentifier() else f"{source} {choice!r}"
    return f"{source}={choice!r}"


def resolve_kind(
    requested: str | None = None,
    environ: Mapping[str, str] | None = None,
    source: str = "device_type",
) -> DeviceKind:
    """Return the DeviceKind to run on.

    `requested` is a kind name, an alias ("gpu") or "auto"/None; `source` is what the
    caller calls it in messages ("--device" on a command line). An explicit choice that
    cannot run here raises UsageError with the reason and the fix; auto picks the first
    usable kind in registry order and says so once when an installed NPU stack cannot load.
    """
    environ = os.environ if environ is None else environ
    choice = str(requested or "auto").strip().lower()
    label = _label(source, requested)
    if choice == "auto":
        value = environ.get(ENV_VAR, "auto")
        choice = value.strip().lower()
        label = f"{ENV_VAR}={choice}" if choice.isidentifier() else f"{ENV_VAR}={value!r}"
    if choice not in ("", "auto"):
        kind = kinds.get(choice, label)
        usable, reason = kind.probe()
        if not usable:
            raise UsageError(f"{label}: {reason}")
        return kind
    for name in kinds.names():
        kind = kinds.get(name)
        usable, reason = kind.probe()
        if usable:
            return kind
        if kind.worth_a_warning_when_skipped():
            warn(f"{reason} (auto-detection skipped {name})")
    raise AssertionError("the cpu kind is always usable")

"""Checks that several groups of main.py's flags share: a number's lower bound, a file that
must exist, a folder the run will write in."""

import math
import os

from devicekit import UsageError, writable


def positive(name: str, value: float | None, minimum: float = 1) -> None:
    """Refuse `value` of flag `name` below `minimum` (or not finite); None is "not given"."""
    if value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"{name} {value} must be a finite number, at least {minimum}")
    if value < minimum:
        raise UsageError(f"{name} {value} must be at least {minimum}")


def check_writable_dir(path: str, flag: str = "--output-dir") -> None:
    """Refuse a folder `flag` names that the run could not create or write in, without
    creating it: its nearest existing ancestor must be a folder that can hold files (a
    file made and removed there proves it), and every component still to be made must fit
    the file system's NAME_MAX."""
    ancestor, missing = writable.nearest_existing(path)
    named = f"{flag} {path!r}"
    if not os.path.isdir(ancestor):
        where = f"cannot be made: {ancestor!r}" if missing else "already"
        raise UsageError(f"{named} {where} exists and is not a folder: choose another {flag}")
    limit = os.pathconf(ancestor, "PC_NAME_MAX")
    for name in missing:
        if len(os.fsencode(name)) > limit:
            raise UsageError(
                f"{named} cannot be made: the name {name[:20]!r}... is "
                f"{len(os.fsencode(name))} bytes, over the file system's limit "
                f"of {limit}: use a shorter name"
            )
    reason = writable.cannot_hold_files(ancestor)
    if reason is not None:
        raise UsageError(
            f"{named} is not writable: making a file in {ancestor!r} fails "
            f"({reason}): choose another {flag}"
        )


def check_file(flag: str, path: str, what: str) -> None:
    """Refuse a `flag` path that is not a file, naming what it is instead."""
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path!r} is a folder: name the {what} in it")
    if not os.path.isfile(path):  # False for a name too long to be one, as for a missing file
        raise UsageError(f"{flag} {path!r} does not exist: check the path")


def check_named(flag: str, path: str | None, what: str = "folder") -> None:
    """Refuse an empty `flag` path: it names no `what`."""
    if path == "":
        raise UsageError(f"{flag} '': name a {what}")

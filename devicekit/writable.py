"""Whether a file can be written somewhere, found out the only reliable way: by making one.

`os.access` answers from the permission bits, and root passes it everywhere: in /proc, on
a read-only mount, in a folder of a file system that refuses new files. The commands and
the trainer check their output paths with these functions before any work starts.
"""

import os
import tempfile


def nearest_existing(path: str | os.PathLike[str]) -> tuple[str, list[str]]:
    """(the nearest path at or above `path` that exists, the names below it still to make)."""
    existing, missing = os.path.abspath(path), list[str]()
    while not os.path.lexists(existing):  # ends at "/" at the latest
        existing, name = os.path.split(existing)
        missing.insert(0, name)
    return existing, missing


def cannot_hold_files(folder: str | os.PathLike[str]) -> str | None:
    """None when a file can be made in `folder` (one is made there and removed), else why
    not, in the system's words."""
    try:
        handle, probe = tempfile.mkstemp(prefix=".devicekit-probe-", dir=folder)
    except OSError as error:
        return error.strerror or str(error)
    os.close(handle)
    os.unlink(probe)
    return None

"""What a launch environment module provides (the LaunchEnvironment Protocol), and the two
questions asked of any one: was it started by a launcher, which of its variables are set."""

from collections.abc import Mapping
from typing import Protocol

from devicekit.environments.context import LaunchContext
from devicekit.environments.options import LaunchOptions
from devicekit.kinds.base import DeviceKind


class LaunchEnvironment(Protocol):
    """A launch environment module: one way a process can be started (a launcher, a
    scheduler, devicekit's own spawn).

    NAME is the LaunchContext.mode it produces, VARIABLES every environment variable it
    reads. `detect()` answers "is this mine?" from the environment (and, for the ways a
    script's own arguments decide, its LaunchOptions) without validating anything and
    without raising; `context()` answers "who is this process?" and raises UsageError
    naming the variable or flag when the answer is inconsistent; `kind` (a DeviceKind, or
    None) bounds the device index by its visible devices.

    Optional, read with getattr: STARTED_BY_LAUNCHER (default True); False where no
    launcher started the process and the script's own arguments decide.
    """

    NAME: str
    VARIABLES: tuple[str, ...]

    def detect(self, environ: Mapping[str, str], options: LaunchOptions) -> bool: ...

    def context(
        self, options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
    ) -> LaunchContext: ...


def started_by_launcher(environment: LaunchEnvironment) -> bool:
    """Whether a launcher started the processes of `environment` (its STARTED_BY_LAUNCHER),
    rather than the script itself."""
    return bool(getattr(environment, "STARTED_BY_LAUNCHER", True))


def variables_set(environment: LaunchEnvironment, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables `environment` reads that are set in `environ`, with values."""
    return {name: environ[name] for name in environment.VARIABLES if name in environ}

"""The interface every launch environment answers."""

import abc
from collections.abc import Mapping

from devicekit.environments.context import LaunchContext
from devicekit.environments.options import LaunchOptions
from devicekit.kinds.base import DeviceKind


class LaunchEnvironment(abc.ABC):
    """One way a process can be started (a launcher, a scheduler, devicekit's own spawn).

    `detect()` answers "is this mine?" from the environment (and, for the ways a script's
    own arguments decide, its LaunchOptions) without validating anything and without
    raising; `context()` answers "who is this process?" and raises UsageError naming the
    variable or flag when the answer is inconsistent.
    """

    name: str = ""  # the LaunchContext.mode it produces
    variables: tuple[str, ...] = ()  # every environment variable it reads
    started_by_launcher: bool = True  # False: no launcher, the script itself decides

    def __repr__(self) -> str:
        return f"<LaunchEnvironment {self.name}>"

    @abc.abstractmethod
    def detect(self, environ: Mapping[str, str], options: LaunchOptions) -> bool:
        """Whether this environment started the process."""

    @abc.abstractmethod
    def context(
        self, options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
    ) -> LaunchContext:
        """Who this process is. `kind` (a DeviceKind, or None) bounds the device index by
        its visible devices."""

    def variables_set(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The variables this environment reads that are set in `environ`, with values."""
        return {name: environ[name] for name in self.variables if name in environ}

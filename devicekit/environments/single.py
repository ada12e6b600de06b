"""No launcher and no ranks given: one process, device 0 (or --gpu/gpu=)."""

from collections.abc import Mapping

from devicekit.environments.base import LaunchEnvironment
from devicekit.environments.context import LaunchContext
from devicekit.environments.options import LaunchOptions
from devicekit.environments.reading import DEFAULT_PORT, LOOPBACK, check_device, to_int
from devicekit.kinds.base import DeviceKind


class Single(LaunchEnvironment):
    name = "single"
    started_by_launcher = False

    def detect(self, environ: Mapping[str, str], options: LaunchOptions) -> bool:
        return True

    def context(
        self, options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
    ) -> LaunchContext:
        device_index = 0 if options.gpu is None else to_int(options.gpu, options.name("gpu"))
        ctx = LaunchContext(self.name, 0, 0, 1, 1, 0, 1, LOOPBACK, DEFAULT_PORT, device_index)
        return check_device(ctx, kind, options.name("gpu"))

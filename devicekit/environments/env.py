"""A per-rank shell loop (launch/run_8p.sh) or any other launcher that exports torchrun's
variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and
serves no store: the ranks meet in devicekit's rendezvous on the master."""

from collections.abc import Mapping

from devicekit.environments.base import LaunchEnvironment
from devicekit.environments.context import LaunchContext
from devicekit.environments.options import LaunchOptions
from devicekit.environments.torchrun import (
    RANK_VARIABLES,
    has_rank_variables,
    rank_variables_context,
)
from devicekit.kinds.base import DeviceKind


class EnvVariables(LaunchEnvironment):
    name = "env"
    variables = RANK_VARIABLES

    def detect(self, environ: Mapping[str, str], options: LaunchOptions) -> bool:
        return has_rank_variables(environ)

    def context(
        self, options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
    ) -> LaunchContext:
        return rank_variables_context(self.name, False, options, environ, kind)

"""A per-rank shell loop (launch/run_8p.sh) or any other launcher that exports torchrun's
variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and
serves no store: the ranks meet in devicekit's rendezvous on the master."""

from collections.abc import Mapping

from devicekit.environments.context import LaunchContext
from devicekit.environments.options import LaunchOptions
from devicekit.environments.torchrun_family import (
    RANK_VARIABLES,
    has_rank_variables,
    rank_variables_context,
)
from devicekit.kinds.base import DeviceKind

NAME = "env"
VARIABLES: tuple[str, ...] = RANK_VARIABLES


def detect(environ: Mapping[str, str], options: LaunchOptions) -> bool:
    """Whether torchrun's variables are set (by a launcher tried after torchrun's family)."""
    return has_rank_variables(environ)


def context(
    options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
) -> LaunchContext:
    """Who this process is, from torchrun's variables; no store is served."""
    return rank_variables_context(options, environ, kind, name=NAME, launcher_store=False)

"""torchrun (and `python -m torch.distributed.run`): RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT and TORCHELASTIC_RUN_ID per worker.

Its workers join the store torchrun's agent serves (env://). The reading of these
variables is shared with torch.distributed.launch and the shell loop (`env`), which
export the same ones (devicekit.environments.torchrun_family).
"""

from collections.abc import Mapping

from devicekit.environments.context import LaunchContext
from devicekit.environments.options import LaunchOptions
from devicekit.environments.torchrun_family import (
    RANK_VARIABLES,
    has_rank_variables,
    rank_variables_context,
)
from devicekit.kinds.base import DeviceKind

NAME = "torchrun"
VARIABLES: tuple[str, ...] = (
    *RANK_VARIABLES,
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
)


def detect(environ: Mapping[str, str], options: LaunchOptions) -> bool:
    """Whether torchrun started this process: its variables and its run id."""
    return has_rank_variables(environ) and "TORCHELASTIC_RUN_ID" in environ


def context(
    options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
) -> LaunchContext:
    """Who this worker is, from torchrun's variables; it joins torchrun's store."""
    return rank_variables_context(options, environ, kind, name=NAME, launcher_store=True)

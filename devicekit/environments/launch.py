"""`python -m torch.distributed.launch`: torchrun's variables, plus `--local-rank=N` appended
to the script's arguments (torch 1.x wrote `--local_rank=N`, and exported no LOCAL_RANK).

Told apart from torchrun by that argument (LaunchOptions.local_rank). Its workers join the
store the launcher serves, or that rank 0 serves through env:// (torch 1.x).
"""

from collections.abc import Mapping, Sequence

from devicekit.environments.context import LaunchContext
from devicekit.environments.options import LaunchOptions
from devicekit.environments.parsing import to_int
from devicekit.environments.torchrun_family import (
    RANK_VARIABLES,
    has_rank_variables,
    rank_variables_context,
)
from devicekit.errors import UsageError
from devicekit.kinds.base import DeviceKind


def pop_local_rank(argv: Sequence[str]) -> tuple[list[str], int | None]:
    """Remove torch.distributed.launch's `--local-rank=N` (or `--local_rank N`, either
    spelling, either form) from `argv`; return (remaining argv, N or None)."""
    remaining: list[str] = []
    local_rank: int | None = None
    tokens = iter(argv)
    for token in tokens:
        name, has_value, value = token.partition("=")
        if name not in ("--local-rank", "--local_rank"):
            remaining.append(token)
            continue
        if not has_value:
            following = next(tokens, None)
            if following is None:
                raise UsageError(f"{name} needs a value, e.g. {name}=0")
            value = following
        local_rank = to_int(value, name)
    return remaining, local_rank


NAME = "launch"
VARIABLES: tuple[str, ...] = RANK_VARIABLES


def detect(environ: Mapping[str, str], options: LaunchOptions) -> bool:
    """Whether torch.distributed.launch started this process: torchrun's variables and the
    --local-rank argument it appends."""
    return has_rank_variables(environ) and options.local_rank is not None


def context(
    options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
) -> LaunchContext:
    """Who this worker is, from torchrun's variables; it joins the launcher's store."""
    return rank_variables_context(options, environ, kind, name=NAME, launcher_store=True)

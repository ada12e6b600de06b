"""Rule `local-rank-alias`: `parser.add_argument("--local_rank", ...)` also accepts
"--local-rank" (and the other way round): torch.distributed.launch passes one, older docs
the other. Its keyword arguments are ported as well (see keyword_arguments)."""

import libcst as cst

from devicekit.port.nodes import string_value, with_arg_after
from devicekit.port.rule import Port

RULES = ("local-rank-alias",)

_LOCAL_RANK_FLAGS = ("--local_rank", "--local-rank")


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    return method == "add_argument"


def on_call(
    port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """parser.add_argument("--local_rank", ...) -> add_argument("--local_rank",
    "--local-rank", ...), unless the script defines both already."""
    flags = {string_value(a.value): a for a in updated.args if a.keyword is None}
    present = [f for f in _LOCAL_RANK_FLAGS if f in flags]
    if len(present) != 1 or set(_LOCAL_RANK_FLAGS) <= port.facts.flags:
        return None
    missing = next(f for f in _LOCAL_RANK_FLAGS if f not in flags)
    result, _ = port.keywords(original, updated, qualified, "add_argument")
    anchor, flag = next(
        (a, a.value)
        for a in result.args
        if a.keyword is None
        and isinstance(a.value, cst.SimpleString)
        and string_value(a.value) == present[0]
    )
    alias = cst.Arg(cst.SimpleString(f"{flag.quote}{missing}{flag.quote}"))
    return port.changed(original, "local-rank-alias", with_arg_after(result, anchor, alias))

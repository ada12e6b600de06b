"""Rule `spawn-launch`: `mp.spawn(fn, args=..., nprocs=torch.cuda.device_count())` ->
`devicekit.launch(fn, args=...)`: the same ranks without a launcher, one rank here under
torchrun & co. `join=False`, `daemon=True` or another start method are reported for a
manual change."""

import libcst as cst
import libcst.matchers as m

from devicekit.port import names
from devicekit.port.nodes import bound_args, keyword, string_value, without_args
from devicekit.port.rule import Port

RULES = ("spawn-launch",)


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    return bool(qualified & names.SPAWN)


def on_call(
    port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """mp.spawn(fn, args=..., nprocs=n) -> devicekit.launch(fn, args=..., nprocs=n), without
    nprocs= where it was the device count (launch's default)."""
    bound = bound_args(updated, names.SPAWN_PARAMS)
    if "fn" not in bound:
        return None
    join, daemon, method = (bound.get(n) for n in ("join", "daemon", "start_method"))
    if (
        (join is not None and not m.matches(join.value, m.Name("True")))
        or (daemon is not None and not m.matches(daemon.value, m.Name("False")))
        or (method is not None and string_value(method.value) != "spawn")
    ):
        port.report(original, names.REASONS["spawn-args"])
        return updated
    removed = [a for a in (join, daemon, method) if a is not None]
    nprocs = bound.get("nprocs")
    if nprocs is not None:
        position = next(i for i, a in enumerate(updated.args) if a is nprocs)
        count = original.args[position].value
        if isinstance(count, cst.Call) and names.DEVICE_COUNT in port.qualified(count.func):
            removed.append(nprocs)  # launch's default: one rank per device
    result = without_args(updated, removed).with_changes(
        func=cst.Attribute(value=cst.Name("devicekit"), attr=cst.Name("launch"))
    )
    if nprocs is None:
        result = result.with_changes(
            args=list(result.args[:-1])
            + [
                result.args[-1].with_changes(
                    comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                ),
                keyword("nprocs", cst.Integer("1")),
            ]
        )
    return port.changed(original, "spawn-launch", result)

"""`dynamic-shape`: a line whose operators see different shapes from one step to the next
(a smaller last batch, a variable sequence length): the NPU compiles each new shape."""

from devicekit.preflight.checks.base import Context, Finding
from devicekit.preflight.recording import Recording, Shapes
from devicekit.preflight.sites import Site

KIND = "dynamic-shape"
KEEP_ORDER = True  # the order the lines first ran in: the first is where the change starts
ADVICE = (
    "keep shapes fixed from step to step: DataLoader(drop_last=True), pad sequences "
    "to a few fixed lengths"
)
SHOWN = 4  # shapes named in a finding's detail


def findings(recording: Recording, context: Context) -> list[Finding]:
    return varying(KIND, recording.shapes, recording)


def varying(
    kind: str, shapes: dict[tuple[str, Site], dict[int, set[Shapes]]], recording: Recording
) -> list[Finding]:
    """A `kind` finding per line of `shapes` (operator and site -> step -> input shapes)
    whose operators see a new shape in a later step, in the order the lines first ran."""
    by_site: dict[Site, tuple[str, list[Shapes]]] = {}
    for (name, site), per_step in shapes.items():
        if not _new_shape_after_first(per_step):
            continue
        seen = sorted({shape for shapes in per_step.values() for shape in shapes}, key=str)
        entry = by_site.setdefault(site, (name, seen))
        if len(seen) > len(entry[1]):
            by_site[site] = (name, seen)
    out = []
    for site, (name, seen) in by_site.items():
        calls = recording.ops[(name, site)]
        named = ", ".join(_varying(shape, seen) for shape in seen[:SHOWN])
        more = f" and {len(seen) - SHOWN} more" if len(seen) > SHOWN else ""
        out.append(
            Finding(
                kind,
                name,
                site[0],
                site[1],
                list(calls.stack),
                len(seen),
                f"{name} saw {len(seen)} input shapes across steps: {named}{more}",
                calls.via,
            )
        )
    return out


def _new_shape_after_first(per_step: dict[int, set[Shapes]]) -> bool:
    """Whether a step after the first this line ran in brings a shape not seen before (a
    first step may run more, such as an optimizer creating its state: that compiles once)."""
    periods = [per_step[step] for step in sorted(per_step)]
    known = set(periods[0])
    for shapes in periods[1:]:
        if not shapes <= known:
            return True
        known |= shapes
    return False


def _varying(shape: Shapes, seen: list[Shapes]) -> str:
    """The input shapes of one call that differ between the calls `seen`, as "[4, 16]"."""
    varying = [
        i
        for i in range(len(shape))
        if len({other[i] if i < len(other) else None for other in seen}) > 1
    ]
    return " x ".join(str(list(shape[i])) for i in varying or range(len(shape))) or "()"

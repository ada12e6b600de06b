"""`cuda-only`: CUDA-only calls in the user's own files that `devicekit port` would rewrite
or that need a change by hand."""

from pathlib import Path

from devicekit.preflight.checks import Context, Finding
from devicekit.preflight.recording import Recording

KIND = "cuda-only"
ADVICE = (
    "python -m devicekit port --write FILE rewrites those shown with '->'; "
    "the others it cannot, and each says what to change by hand"
)


def findings(recording: Recording, context: Context) -> list[Finding]:
    from devicekit.port.engine import ParseFailure, port_source

    out = []
    for path in context.scripts:
        try:
            _, report = port_source(Path(path).read_bytes(), path)
        except (OSError, ParseFailure):
            continue
        for change in report.changes:
            out.append(
                Finding(
                    KIND,
                    change.before,
                    path,
                    change.line,
                    [f"{path}:{change.line}"],
                    1,
                    f"{change.rule}: {change.before} -> {change.after}",
                )
            )
        for item in report.manual:
            out.append(
                Finding(
                    KIND,
                    item.construct,
                    path,
                    item.line,
                    [f"{path}:{item.line}"],
                    1,
                    f"{item.why}; {item.fix}",
                )
            )
    return out

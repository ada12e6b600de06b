"""`cuda-only`: CUDA-only calls in the user's own files that `devicekit port` would rewrite
or that need a change by hand (Ascend's own calls, which run on the NPU, are not reported)."""

import re
from pathlib import Path

from devicekit.preflight.checks.base import Context, Finding
from devicekit.preflight.recording import Recording

KIND = "cuda-only"
ADVICE = (
    "python -m devicekit port --write FILE rewrites those shown with '->'; "
    "the others it cannot, and each says what to change by hand"
)

# Ascend's own code (torch.npu, `.npu()`, torch_npu's operators and optimizers, Ascend's
# apex, hccl) runs on the NPU as written: port reports it for the other devices' sake.
_ASCEND = re.compile(r"npu|hccl|\bapex\b|\bamp\.", re.IGNORECASE)
_CUDA = re.compile(r"cuda|nccl|cudnn", re.IGNORECASE)


def _ascend_only(construct: str) -> bool:
    return bool(_ASCEND.search(construct)) and not _CUDA.search(construct)


def findings(recording: Recording, context: Context) -> list[Finding]:
    from devicekit.port.engine import port_source
    from devicekit.port.source_bytes import ParseFailure

    out = []
    for path in context.scripts:
        try:
            _, report = port_source(Path(path).read_bytes(), path)
        except (OSError, ParseFailure):
            continue
        for change in report.changes:
            if _ascend_only(change.before):
                continue
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
            if _ascend_only(item.construct):
                continue
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

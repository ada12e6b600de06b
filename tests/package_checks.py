"""What the package must hold: what tests/test_package.py checks a built wheel against."""

import re
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
# What `devicekit simulate` puts on PYTHONPATH: not packages of devicekit, so package data.
_SIMULATE_SITES = sorted(
    path.relative_to(_REPO).as_posix()
    for site in ("site", "apex_site")
    for path in (_REPO / "devicekit" / "simulate" / site).rglob("*")
    if path.is_file() and "__pycache__" not in path.parts
)
# Data files the library reads at run time, besides its modules.
DATA_FILES = (
    "devicekit/py.typed",
    "devicekit/simulate/npu_standin.cpp",
    "devicekit/preflight/torch_npu_2.13.0_ops.txt",
    *_SIMULATE_SITES,
)
_MARKER = "<!-- library example:"


def wheel_problems(names: list[str]) -> list[str]:
    """What is wrong with a wheel holding `names`: other top-level packages, a missing
    data file or licence."""
    problems = []
    tops = {name.split("/")[0] for name in names}
    others = sorted(t for t in tops if t != "devicekit" and not t.endswith(".dist-info"))
    if others:
        problems.append(f"holds more than devicekit: {', '.join(others)}")
    problems += [f"{data} is missing" for data in DATA_FILES if data not in names]
    if not any(re.search(r"\.dist-info/(licenses/)?LICENSE$", name) for name in names):
        problems.append("the LICENSE is missing")
    return problems


def library_example(readme: str) -> str:
    """The python block that follows README's library-example marker."""
    after = readme[readme.index(_MARKER) :]
    return re.search(r"```python\n(.*?)```", after, re.S).group(1)

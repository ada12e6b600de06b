"""run.py's group `collectives`: gloo all_reduce bus bandwidth between 2 ranks on this host,
as `devicekit check` measures it."""

import json

from process import PY, run


def measure(_pairs):
    """gloo all_reduce bus bandwidth between 2 ranks on this host (devicekit check)."""
    report = json.loads(
        run(
            [PY, "-m", "devicekit", "check", "--json", "--device", "cpu", "--nproc-per-node", "2"],
            timeout=300,
        )
    )
    return {"collectives (gloo)": report["bandwidth"]}, {}

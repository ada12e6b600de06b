"""Two nodes on one machine: two network namespaces joined by a veth pair, and run_8p.sh
started on both (test_faults.py's two-node run, test_environments.py's Slurm-way run, which
must end with the same weights).

A module gets the fixture `two_namespaces` by importing its function,

    from support.two_nodes import two_namespaces_fixture  # noqa: F401

and marks its tests `two_node` (setup.cfg): they need root and iproute2's `ip netns`, and
are skipped where a namespace cannot be made.
"""

import os
import shutil
import subprocess

import pytest

from support.launchers import PY, RUN_8P
from support.runs import tiny_args
from support.tracked import GONE_BOUND_S

# main.py's arguments for the two-node runs: run_8p.sh's in test_faults.py and Slurm's in
# test_environments.py, which must end with the same weights.
TWO_NODE_ARGS = tiny_args(print_freq=None)


def _ip(*args, check=True):
    return subprocess.run(
        ["ip", *map(str, args)], capture_output=True, text=True, timeout=30, check=check
    )


@pytest.fixture(scope="module", name="two_namespaces")
def two_namespaces_fixture():
    """Two network namespaces joined by a veth pair with private addresses (only inside
    them); removed, with the veth, when the module ends. {"names", "links", "addresses"},
    node 0's first."""
    if shutil.which("ip") is None:
        pytest.skip("iproute2's `ip` is not installed")
    tag = f"dk{os.getpid()}"
    names, links = [f"{tag}a", f"{tag}b"], [f"{tag}a0", f"{tag}b0"]
    subnet = f"10.231.{os.getpid() % 250 + 1}"
    addresses = [f"{subnet}.1", f"{subnet}.2"]
    created = []
    try:
        probe = _ip("netns", "add", names[0], check=False)
        if probe.returncode != 0:
            pytest.skip(
                f"cannot create a network namespace (needs root/CAP_NET_ADMIN): "
                f"{probe.stderr.strip()}"
            )
        created.append(names[0])
        _ip("netns", "add", names[1])
        created.append(names[1])
        _ip("link", "add", links[0], "type", "veth", "peer", "name", links[1])
        for name, link, address in zip(names, links, addresses, strict=False):
            _ip("link", "set", link, "netns", name)
            _ip("-n", name, "addr", "add", f"{address}/24", "dev", link)
            _ip("-n", name, "link", "set", link, "up")
            _ip("-n", name, "link", "set", "lo", "up")
        exec_probe = _ip("netns", "exec", names[0], "true", check=False)
        if exec_probe.returncode != 0:
            pytest.skip(f"`ip netns exec` does not work here: {exec_probe.stderr.strip()}")
        yield {"names": names, "links": links, "addresses": addresses}
    finally:
        for name in created:
            _ip("netns", "del", name, check=False)
        _ip("link", "del", links[0], check=False)  # if it never moved into a namespace
        left = _ip("netns", "list", check=False).stdout
        assert not any(name in left for name in names), left


def run_8p_on_two_nodes(run, ns, args, tmp_path, log_dir="node", timeout=200):
    """run_8p.sh with 2 ranks on each of the two namespaces' nodes, started with `run` (a
    support.tracked.Tracked; rank logs in tmp_path/<log_dir><node>, output in
    tmp_path/out<node>); the Finished of both nodes, once no process of the run is left."""
    for node in (0, 1):
        env = run.env(
            NNODES=2,
            NODE_RANK=node,
            MASTER_ADDR=ns["addresses"][0],
            MASTER_PORT=29500,
            NPROC_PER_NODE=2,
            LOG_DIR=tmp_path / f"{log_dir}{node}",
            PYTHON=PY,
        )
        run.start(
            f"node{node}",
            [
                "ip",
                "netns",
                "exec",
                ns["names"][node],
                "bash",
                RUN_8P,
                *args,
                "--output-dir",
                tmp_path / f"out{node}",
            ],
            env,
        )
    results = [run.wait(f"node{node}", timeout)[0] for node in (0, 1)]
    run.wait_all_gone(GONE_BOUND_S)
    return results

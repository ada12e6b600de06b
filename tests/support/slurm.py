"""A real Slurm cluster for the tests: munged, slurmctld and two slurmd (Slurm's
multiple-slurmd mode: nodes n1 and n2 on one machine) on loopback, with a configuration of
its own, started for a module and stopped at its end with nothing left running.

    with SlurmCluster.started() as cluster:        # skips (fails in CI) without Slurm or root
        job = cluster.sbatch(["-n2"], script_path, args, env, cwd)
        cluster.wait_for(job, 120)                 # "COMPLETED", polled with a bound

Every command a test runs (srun, sbatch, scontrol, scancel) gets the cluster's SLURM_CONF
through `cluster.env(base)`. The daemons run as root without systemd or cgroups
(proctrack/linuxproc, task/none), and each node claims 8 CPUs (config_overrides) so that
several 2-rank jobs run at once on a 2-core machine. `cluster.requeue(job)` brings a
requeued job back at once instead of after Slurm's two-minute hold.
"""

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from support.npu_wheel import skip_or_fail

COMMANDS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "scontrol", "scancel", "squeue")
NODES = ("n1", "n2")
CPUS_PER_NODE = 8
KILL_WAIT_S = 5  # Slurm's KillWait: SIGTERM, then SIGKILL this long after
START_BOUND_S = 30
COMMAND_TIMEOUT_S = 30
LINK = "dkslurm0"  # the veth of _an_address_beside_loopback
FINISHED = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
)


def _free_ports(count):
    """`count` different free loopback ports."""
    from devicekit.environments import find_free_port  # after torch: see tests/conftest.py

    ports = set()
    while len(ports) < count:
        ports.add(find_free_port())
    return list(ports)


def missing():
    """Why this machine cannot run the cluster (a missing command, not root), or None."""
    absent = [name for name in COMMANDS if shutil.which(name) is None]
    if absent:
        return (
            f"Slurm is not installed ({', '.join(absent)} missing): apt-get install "
            "--no-install-recommends slurm-wlm munge"
        )
    if os.geteuid() != 0:
        return "the test cluster's daemons run as root (SlurmUser=root)"
    return None


def _config(folder, ctld_port, node_ports):
    host = socket.gethostname()
    nodes = "\n".join(
        f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} "
        f"CPUs={CPUS_PER_NODE} State=UNKNOWN"
        for name, port in zip(NODES, node_ports, strict=True)
    )
    return f"""\
ClusterName=devicekit
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={folder}/munge/munge.sock
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool/%n
SlurmctldPidFile={folder}/run/slurmctld.pid
SlurmdPidFile={folder}/run/slurmd-%n.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmdLogFile={folder}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
EnforcePartLimits=ALL
ReturnToService=2
JobRequeue=0
MpiDefault=none
KillWait={KILL_WAIT_S}
InactiveLimit=0
MinJobAge=600
MailProg=/bin/true
{nodes}
PartitionName=main Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP
"""


def _ip(*args):
    return subprocess.run(
        ["ip", *args], capture_output=True, text=True, check=True, timeout=COMMAND_TIMEOUT_S
    ).stdout


@contextlib.contextmanager
def _an_address_beside_loopback():
    """Slurm's daemons bind their ports with getaddrinfo(NULL, PORT, AI_PASSIVE |
    AI_ADDRCONFIG), which finds no address family where loopback has the only address (the
    xdist workers' network namespaces, tests/conftest.py): "Unable to bind listen port".
    There, for the block, a veth pair of this namespace's own gets a private address."""
    addresses = [line.split()[1] for line in _ip("-4", "-o", "addr", "show").splitlines()]
    if any(link != "lo" for link in addresses):
        yield
        return
    _ip("link", "add", LINK, "type", "veth", "peer", "name", f"{LINK}p")
    try:
        _ip("addr", "add", "10.254.254.1/32", "dev", LINK)
        _ip("link", "set", LINK, "up")
        yield
    finally:
        _ip("link", "del", LINK)


class SlurmCluster:
    """munged, slurmctld and one slurmd per node, in a fresh folder under /tmp (munged
    wants every folder above its socket world-searchable, which pytest's tmp_path is not)."""

    def __init__(self):
        self.folder = Path(tempfile.mkdtemp(prefix="devicekit-slurm-"))
        self.folder.chmod(0o755)
        self.conf = self.folder / "slurm.conf"
        self._daemons = []

    @classmethod
    @contextlib.contextmanager
    def started(cls):
        """A running cluster for the block; skipped (failed in CI) where there is none."""
        reason = missing()
        if reason:
            skip_or_fail(reason)
        with _an_address_beside_loopback():
            cluster = cls()
            try:
                cluster._start()
                yield cluster
            finally:
                cluster._stop()

    def env(self, base):
        """`base` (a child's environment) with this cluster's SLURM_CONF."""
        return dict(base, SLURM_CONF=str(self.conf))

    def _daemon(self, name, argv):
        log = open(self.folder / "log" / f"{name}.out", "w")
        env = {"PATH": os.environ["PATH"], "SLURM_CONF": str(self.conf)}
        self._daemons.append(
            (
                name,
                subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
                ),
            )
        )
        log.close()

    def _start(self):
        folder = self.folder
        for sub in ("munge", "state", "run", "log", *(f"spool/{node}" for node in NODES)):
            (folder / sub).mkdir(parents=True)
        (folder / "munge").chmod(0o755)
        key = folder / "munge" / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
        ctld_port, *node_ports = _free_ports(1 + len(NODES))
        self.conf.write_text(_config(folder, ctld_port, node_ports))
        munge = folder / "munge"
        self._daemon(
            "munged",
            [
                "munged",
                "--foreground",
                f"--key-file={munge}/munge.key",
                f"--socket={munge}/munge.sock",
                f"--pid-file={munge}/munged.pid",
                f"--seed-file={munge}/munged.seed",
                f"--log-file={munge}/munged.log",
            ],
        )
        self._until(lambda: (munge / "munge.sock").exists(), "munged's socket")
        self._daemon("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        for node in NODES:
            self._daemon(f"slurmd-{node}", ["slurmd", "-D", "-f", str(self.conf), "-N", node])
        self._until(
            lambda: self.run(["sinfo", "-h", "-o", "%T"], check=False).stdout.split() == ["idle"],
            "both nodes idle",
        )

    def _until(self, ready, what):
        deadline = time.monotonic() + START_BOUND_S
        while not ready():
            for name, proc in self._daemons:
                if proc.poll() is not None:
                    pytest.fail(f"{name} exited with {proc.returncode}\n{self.logs()}")
            if time.monotonic() > deadline:
                pytest.fail(f"{what}: not within {START_BOUND_S} s\n{self.logs()}")
            time.sleep(0.1)

    def logs(self):
        """The daemons' logs, for a failure message."""
        texts = []
        for path in sorted((self.folder / "log").glob("*")):
            texts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(texts)

    def _stop(self):
        if any(name == "slurmctld" for name, _ in self._daemons):
            self.run(["scontrol", "shutdown"], check=False)
        for _, proc in reversed(self._daemons):
            if proc.poll() is None and proc.args[0] == "munged":
                proc.terminate()
            try:
                proc.wait(timeout=COMMAND_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    def run(self, argv, check=True, env=None):
        """A Slurm command (scontrol, sinfo, ...) run to its end, with a timeout."""
        result = subprocess.run(
            [str(a) for a in argv],
            env=self.env(env or {"PATH": os.environ["PATH"]}),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        if check and result.returncode:
            pytest.fail(f"{argv} exited {result.returncode}: {result.stderr}")
        return result

    def sbatch(self, options, script, args, env, cwd):
        """Submit `script ARGS` with sbatch's `options` (they win over the script's #SBATCH
        lines); its job id."""
        result = subprocess.run(
            ["sbatch", "--parsable", *map(str, options), str(script), *map(str, args)],
            env=self.env(env),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        if result.returncode:
            pytest.fail(f"sbatch exited {result.returncode}: {result.stderr}")
        return int(result.stdout.strip().split(";")[0])

    def job(self, job_id):
        """`scontrol show job`'s fields of `job_id` (JobState, ExitCode, Restarts, ...)."""
        text = self.run(["scontrol", "show", "job", "-o", job_id]).stdout
        return dict(item.split("=", 1) for item in text.split() if "=" in item)

    def requeue(self, job_id, timeout):
        """`scontrol requeue` the running job and release it from its hold: back in the
        queue, Slurm holds a requeued job for its credential lifetime (BeginTime, two
        minutes). The release starts it one second on: slurmd refuses a job credential whose
        creation second is not later than the second its last one was revoked (the requeue's),
        and Slurm fails a job it could not start ("Job credential revoked": FAILED, exit code
        1, without a line of the new attempt), so a release within the requeue's second
        would end the job instead of restarting it."""
        self.run(["scontrol", "requeue", job_id])
        self.wait_for(job_id, timeout, ("PENDING",))
        self.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now+1"])

    def wait_for(self, job_id, timeout, states=FINISHED):
        """Poll until the job's state is one of `states`; its fields."""
        deadline = time.monotonic() + timeout
        while True:
            fields = self.job(job_id)
            if fields["JobState"] in states:
                return fields
            if time.monotonic() > deadline:
                pytest.fail(
                    f"job {job_id} still {fields['JobState']} after {timeout} s\n{self.logs()}"
                )
            time.sleep(0.1)

"""LaunchContext: who this process is in the run, whatever started it."""

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class LaunchContext:
    """Who this process is in the run, whatever started it (built by keyword only: most
    fields are ints, which a positional call could swap unnoticed).

    `mode` names the launch environment that produced it (devicekit.environments);
    `launcher_store` says how the process group is joined: through the store the
    launcher's agent serves (env://, torchrun and torch.distributed.launch), or through
    devicekit's own rendezvous on the master (every other environment).
    """

    mode: str
    """The launch environment: `torchrun`, `launch`, `env`, `slurm`, `spawn`, `single`..."""
    rank: int
    """This process's rank among all processes of the run."""
    local_rank: int
    """This process's index among the processes of its node."""
    world_size: int
    """How many processes the run has."""
    local_world_size: int
    """How many processes run on this node."""
    node_rank: int
    """This node's index."""
    nnodes: int
    """How many nodes the run has."""
    master_addr: str
    """The address where the ranks meet."""
    master_port: int
    """The port where the ranks meet."""
    device_index: int
    """The index of the device this process computes on (0 on a CPU)."""
    device_list: tuple[int, ...] | None = None
    """The devices of the node's processes, in local-rank order, when given (`--device-list`)."""
    launcher_store: bool = False
    """Whether the ranks join the store the launcher's agent serves (env://)."""
    restarts: int = 0
    """How many times the launcher restarted the run before this attempt (torchrun's
    TORCHELASTIC_RESTART_COUNT, Slurm's SLURM_RESTART_COUNT after a requeue)."""

    @property
    def distributed(self) -> bool:
        """Whether more than one process takes part."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Whether this is global rank 0 (the one that prints and writes)."""
        return self.rank == 0

    @property
    def init_method(self) -> str:
        """The process-group init method: env:// where the launcher serves the store, else
        tcp://MASTER:PORT."""
        if self.launcher_store:
            return "env://"
        host = f"[{self.master_addr}]" if ":" in self.master_addr else self.master_addr
        return f"tcp://{host}:{self.master_port}"

    def for_spawned_rank(self, index: int) -> "LaunchContext":
        """The context of the `index`-th process spawned on this node (spawn mode)."""
        return dataclasses.replace(
            self,
            rank=self.node_rank * self.local_world_size + index,
            local_rank=index,
            device_index=self.device_list[index] if self.device_list else index,
        )

    def describe(self) -> str:
        """A one-line summary for logs."""
        return (
            f"{self.mode}: rank {self.rank}/{self.world_size}, local rank "
            f"{self.local_rank}/{self.local_world_size}, node {self.node_rank}/{self.nnodes}, "
            f"master {self.master_addr}:{self.master_port}"
            + (f", restart {self.restarts}" if self.restarts else "")
        )

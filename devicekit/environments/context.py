"""LaunchContext: who this process is in the run, whatever started it."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class LaunchContext:
    """Who this process is in the run, whatever started it.

    `mode` names the launch environment that produced it (devicekit.environments);
    `launcher_store` says how the process group is joined: through the store the
    launcher's agent serves (env://, torchrun and torch.distributed.launch), or through
    devicekit's own rendezvous on the master (every other environment).
    """

    mode: str
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    nnodes: int
    master_addr: str
    master_port: int
    device_index: int
    device_list: tuple[int, ...] | None = None
    launcher_store: bool = False

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
        )

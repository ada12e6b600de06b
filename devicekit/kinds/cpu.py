"""The CPU: always present, one device, collectives over gloo."""

import resource

import torch

from devicekit.kinds.base import DeviceKind


class CpuKind(DeviceKind):
    name = "cpu"
    default_backend = "gloo"
    accepted_backends = frozenset({"gloo"})
    default_amp_dtype = torch.bfloat16

    def probe(self):
        return True, ""

    def device_count(self):
        return 1

    def memory_stats(self):
        # ru_maxrss is in KiB on Linux: the process's peak resident memory.
        return {"max_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}

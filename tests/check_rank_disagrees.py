"""Test helper (not collected): one rank of `devicekit check` where rank 1 sees a wrong sum.

Started once per rank by tests/test_check_multiprocess.py in the per-rank shell-loop style
(RANK/WORLD_SIZE/LOCAL_RANK/MASTER_* exported). On rank 1 only, the first SUM all_reduce
gets 1 added to its result after the real collective, so that rank's all_reduce_sum check
fails while every collective still completes on both ranks. Production code is untouched:
the patch lives here and replaces torch.distributed.all_reduce, which devicekit.check looks
up at call time. Exit code: 0 when run_rank reports every rank right, else EXIT_DISAGREE.
"""

import sys

import torch.distributed as dist

import devicekit  # first: sets TORCH_DEVICE_BACKEND_AUTOLOAD before torch is imported
from devicekit.check import EXIT_DISAGREE, run_rank

MAX_BYTES = 65536
TIMEOUT_S = 60


def corrupt_first_sum():
    """Make this process's first SUM all_reduce return a wrong (+1) result."""
    real_all_reduce = dist.all_reduce
    state = {"corrupted": False}

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        work = real_all_reduce(tensor, op=op, group=group, async_op=async_op)
        if not state["corrupted"] and op == dist.ReduceOp.SUM:
            state["corrupted"] = True
            if work is not None:
                work.wait()
            tensor.add_(1)
        return work

    dist.all_reduce = all_reduce


@devicekit.exit_on_usage_error
def main():
    ctx = devicekit.init_distributed(device_type="cpu", timeout=TIMEOUT_S)
    if ctx.rank == 1:
        corrupt_first_sum()
    ok = run_rank(ctx, max_bytes=MAX_BYTES, as_json=False)
    devicekit.destroy_process_group()
    return 0 if ok else EXIT_DISAGREE


if __name__ == "__main__":
    sys.exit(main())

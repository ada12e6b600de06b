"""An Ascend-style DDP script that never imports devicekit: `import torch_npu`, the device
by its "npu:{}" string, `.npu()`, an hccl process group, a DataLoader with a worker
process. Under `devicekit simulate` every process it runs in has the stand-in."""

import os
import sys

import torch
import torch.distributed as dist
import torch_npu
from torch.utils.data import DataLoader, TensorDataset


def main():
    rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.npu.set_device("npu:{}".format(rank))  # noqa: UP032  (as Ascend scripts write it)
    torch.npu.set_compile_mode(jit_compile=False)
    torch.npu.set_option({"ACL_OP_SELECT_IMPL_MODE": "high_precision"})
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("hccl")
    data = TensorDataset(torch.arange(8.0).reshape(4, 2))
    [batch] = next(iter(DataLoader(data, batch_size=4, num_workers=1)))
    total = batch.npu().sum()
    if dist.is_initialized():
        dist.all_reduce(total)
        dist.destroy_process_group()
    # One write per line: the ranks share torchrun's stdout, and print() writes the line
    # and its newline apart, which another rank's line can fall between.
    sys.stdout.write(f"rank {rank} on {total.device}: {total.item()}\n")
    sys.stdout.flush()
    if rank == 0:
        fused = hasattr(torch_npu, "npu_grouped_matmul")  # a feature check, as Ascend code writes
        print(f"torch_npu {torch_npu.__version__}, npu_grouped_matmul: {fused}", flush=True)
        try:
            torch_npu.npu_grouped_matmul(total, total)
        except AttributeError as error:
            print(f"refused: {error}", flush=True)


if __name__ == "__main__":
    main()

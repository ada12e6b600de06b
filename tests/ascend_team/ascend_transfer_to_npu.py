"""CUDA code on Ascend through torch_npu.contrib.transfer_to_npu, as an Ascend team tests it:
its torch.cuda calls, "cuda" devices and .cuda() land on npu."""

import importlib
import io
import warnings

import pytest
import torch
import torch.distributed as dist
import torch_npu  # noqa: F401
from torch import nn
from torch_npu.contrib import transfer_to_npu


@pytest.fixture(autouse=True)
def _device_zero_after_each_test():
    yield
    torch.cuda.set_device(0)


def test_cuda_tensors_are_npu_tensors():
    assert torch.cuda.is_available()
    assert torch.cuda.device_count() == torch.npu.device_count() == 2
    assert str(torch.zeros(2, device="cuda").device) == "npu:0"
    assert str(torch.ones(2, device="cuda:1").device) == "npu:1"
    assert str(torch.tensor([1.0], device=torch.device("cuda:1")).device) == "npu:1"
    x = torch.arange(4.0).cuda()
    assert str(x.device) == "npu:0" and x.is_cuda
    assert str(x.to("cuda:1").device) == "npu:1"
    assert str(x.to(1).device) == "npu:1"  # an int in .to() is a CUDA index
    assert str(x.to(torch.device("cuda", 1)).device) == "npu:1"
    assert str(x.new_zeros(3, device="cuda:1").device) == "npu:1"
    assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


def test_module_cuda_puts_every_parameter_on_npu():
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8)).cuda()
    assert {str(t.device) for t in [*model.parameters(), *model.buffers()]} == {"npu:0"}
    model.to("cuda:1")
    assert {str(p.device) for p in model.parameters()} == {"npu:1"}
    model.cuda(0)
    assert {str(p.device) for p in model.parameters()} == {"npu:0"}


def test_set_device_memory_statistics_and_synchronize():
    torch.cuda.set_device(1)
    assert torch.cuda.current_device() == 1
    assert str(torch.zeros(1, device="cuda").device) == "npu:1"
    torch.cuda.set_device("cuda:0")
    with torch.cuda.device(1):
        assert torch.cuda.current_device() == 1
    assert torch.cuda.current_device() == 0
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    block = torch.empty(1024, device="cuda")  # 4096 bytes
    assert torch.cuda.memory_allocated() - before == block.numel() * 4
    assert torch.cuda.max_memory_allocated() >= torch.cuda.memory_allocated()
    assert torch.cuda.memory_stats()["allocated_bytes.all.current"] == torch.cuda.memory_allocated()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def test_cuda_amp_autocasts_to_fp16_and_grad_scaler_steps():
    torch.manual_seed(0)
    model = nn.Linear(4, 2).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.cuda.amp.GradScaler()
    inputs = torch.randn(8, 4).cuda()
    before = model.weight.detach().clone()
    with torch.cuda.amp.autocast():
        assert torch.is_autocast_enabled()
        output = model(inputs)
        loss = output.float().pow(2).mean()
    assert output.dtype == torch.float16
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 2.0**16
    assert not torch.equal(model.weight.detach(), before)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert model(inputs).dtype == torch.bfloat16


def test_nccl_is_hccl_and_ddp_takes_cuda_device_ids(tmp_path):
    dist.init_process_group(
        "nccl", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1
    )
    try:
        assert dist.get_backend() == "hccl"
        assert dist.get_backend(dist.new_group([0], backend="nccl")) == "hccl"
        model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2).cuda(), device_ids=[0])
        model(torch.randn(3, 4, device="cuda")).sum().backward()
        assert {str(p.grad.device) for p in model.parameters()} == {"npu:0"}
    finally:
        dist.destroy_process_group()


def test_checkpoints_load_onto_the_cuda_device_named():
    buffer = io.BytesIO()
    torch.save({"weight": torch.ones(2, device="cuda")}, buffer)
    buffer.seek(0)
    assert str(torch.load(buffer, map_location="cuda:1")["weight"].device) == "npu:1"


def test_a_torch_cuda_function_the_stand_in_lacks_says_so():
    assert not hasattr(torch.npu, "current_blas_handle")  # torch_npu.npu has it; not here
    with pytest.raises(RuntimeError, match=r"^torch\.cuda\.current_blas_handle is torch\.npu"):
        torch.cuda.current_blas_handle()


def test_importing_it_again_changes_nothing():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        importlib.reload(transfer_to_npu)
    assert caught == []
    assert str(torch.zeros(1, device="cuda:1").device) == "npu:1"

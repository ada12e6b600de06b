"""torch.npu's device, memory, random-state and stream calls, as an Ascend team's training
and benchmark code makes them: device properties, free memory, the memory summary, timing
with events, lazy modules moved with .npu(), torch.npu.config."""

import os
import re
import time

import pytest
import torch
import torch_npu
from torch import nn

MIB = 1024 * 1024


def test_two_timed_events_measure_the_work_between_them_in_milliseconds():
    x = torch.randn(128, 128, device="npu")
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    begun = time.perf_counter()
    start.record()
    while time.perf_counter() - begun < 0.05:  # about 50 ms of work on the device
        x = torch.tanh(x @ x)
    end.record()
    end.synchronize()
    wall_ms = (time.perf_counter() - begun) * 1000
    assert 0.5 * wall_ms <= start.elapsed_time(end) <= wall_ms


def test_elapsed_time_needs_two_recorded_events_made_for_timing():
    untimed, timed = torch.npu.Event(), torch.npu.Event(enable_timing=True)
    untimed.record()
    timed.record()
    with pytest.raises(RuntimeError, match=r"enable_timing=True"):
        untimed.elapsed_time(timed)
    with pytest.raises(RuntimeError, match=r"record\(\)"):
        timed.elapsed_time(torch.npu.Event(enable_timing=True))


def test_a_lazy_module_moved_with_npu_initialises_its_parameters_there():
    model = nn.Sequential(nn.LazyLinear(3), nn.ReLU()).npu()
    out = model(torch.ones(2, 5, device="npu"))
    assert str(out.device) == "npu:0" and out.shape == (2, 3)
    weight = model[0].weight
    assert str(weight.device) == "npu:0" and weight.shape == (3, 5)


def test_device_properties_name_the_device_and_its_memory():
    props = torch.npu.get_device_properties(0)
    assert props.name == torch.npu.get_device_name(0)
    assert props.total_memory == torch.npu.mem_get_info(0)[1] > 0
    if not os.environ.get("DEVICEKIT_SIMULATE_MEMORY"):  # no capacity set: the host's memory
        assert props.total_memory == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert props.cube_core_num > 0 and props.vector_core_num > 0 and props.L2_cache_size >= 0
    assert props.major is None and props.multi_processor_count is None  # as on an NPU
    assert re.fullmatch(r"[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}", str(props.uuid))
    assert len(props.uuid.bytes) == 16
    other = torch.npu.get_device_properties("npu:1")
    assert str(other.uuid) != str(props.uuid)
    assert repr(props).startswith(f"_NPUDeviceProperties(name='{props.name}', total_memory=")
    with pytest.raises(AssertionError, match="npu:2"):
        torch.npu.get_device_properties(torch.npu.device_count())


def test_free_memory_and_the_summary_follow_the_tensors_of_each_device():
    before = torch.npu.memory_allocated(1)
    block = torch.empty(2 * MIB, dtype=torch.float32, device="npu:1")  # 8 MiB
    assert torch.npu.memory_allocated(1) - before == 8 * MIB
    free, total = torch.npu.mem_get_info("npu:1")
    assert 0 < free <= total
    now = torch.npu.memory_allocated(1)
    for summary in (
        torch.npu.memory_summary(1, abbreviated=True),
        torch.npu.memory_summary(torch.device("npu", 1)),
    ):
        assert "npu:1" in summary and f"{now / MIB:.2f} MiB" in summary, summary
    del block
    with pytest.warns(DeprecationWarning, match="memory_reserved"):
        assert torch.npu.memory_cached(1) == torch.npu.memory_reserved(1) == before
    with pytest.warns(DeprecationWarning, match="max_memory_reserved"):
        assert torch.npu.max_memory_cached(1) == torch.npu.max_memory_reserved(1) >= now
    with pytest.warns(DeprecationWarning, match="reset_peak_memory_stats"):
        torch.npu.reset_max_memory_allocated(1)
    assert torch.npu.max_memory_allocated(1) == before
    torch.empty(MIB, device="npu:1")  # 4 MiB, freed at once: only the peak keeps them
    assert torch.npu.max_memory_reserved(1) == before + 4 * MIB
    with pytest.warns(DeprecationWarning, match="reset_peak_memory_stats"):
        torch.npu.reset_max_memory_cached(1)
    assert torch.npu.max_memory_reserved(1) == before


def test_random_states_of_all_devices_replay_the_same_numbers():
    torch.npu.manual_seed_all(7)
    states = torch.npu.get_rng_state_all()
    assert len(states) == torch.npu.device_count()
    first = torch.randn(4, device="npu").cpu()
    torch.npu.set_rng_state_all(states)
    assert torch.equal(torch.randn(4, device="npu").cpu(), first)
    torch.npu.seed_all()
    assert torch.npu.initial_seed() != 7


def test_device_capability_is_none_unless_torch_npu_device_capability_is_set(monkeypatch):
    monkeypatch.delenv("TORCH_NPU_DEVICE_CAPABILITY", raising=False)
    with pytest.warns(UserWarning, match="TORCH_NPU_DEVICE_CAPABILITY"):
        assert torch.npu.get_device_capability() is None
    monkeypatch.setenv("TORCH_NPU_DEVICE_CAPABILITY", "8.0")
    with pytest.warns(UserWarning, match="PyTorch"):
        assert torch.npu.get_device_capability(0) == (8, 0)
    monkeypatch.setenv("TORCH_NPU_DEVICE_CAPABILITY", "sm80")
    with pytest.warns(UserWarning, match="'sm80' is not major.minor"):
        assert torch.npu.get_device_capability() is None


def test_internal_format_setting_is_taken_and_cannot_be_read():
    torch.npu.config.allow_internal_format = False
    torch_npu.npu.config.allow_internal_format = True
    assert torch_npu.npu.config is torch.npu.config
    with pytest.raises(AttributeError, match="allow_internal_format"):
        torch.npu.config.allow_internal_format  # noqa: B018  (reading it is the test)


def test_streams_graph_capture_and_utilization():
    assert torch.npu.is_current_stream_capturing() is False
    torch.npu.set_stream(torch.npu.current_stream(1))
    torch.npu.set_stream(None)
    assert torch.npu.current_device() == 0  # selecting a stream keeps the current device
    assert torch.npu.utilization() == torch.npu.utilization("npu:1") == 0  # idle when asked

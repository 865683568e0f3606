"""torch's memory figures and estimates (devshim/backends/torch/memory.py) and the count of its
virtual GPUs' memory (devshim/backends/torch/_virtual/memory.py): what they promise that the
mutation env (`tox -e mutation`, tools/mutation.py) found no test holding them to. Estimates run
on fake tensors anywhere torch is installed; a CUDA or MPS call is stood in for where the test needs
one; the virtual GPUs' tests register two of them in the process (the `vgpu` fixture)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

import devshim as ds
from devshim import settings
from devshim.backends import memory_base
from devshim.backends.memory_base import format_bytes

torch = pytest.importorskip("torch")

from devshim.backends.torch import _internals  # noqa: E402  (after torch is known to be there)
from devshim.backends.torch import memory as torch_memory  # noqa: E402

METHOD = "torch FakeTensorMode: the bytes of every storage the step makes, on its device, while it lives"


@pytest.fixture(autouse=True)
def _no_size_left_behind():
    yield
    settings.set_virtual_memory(None)


def _estimate(step, *args, **kwargs):
    return ds.estimate_memory(step, *args, backend="torch", **kwargs)


@pytest.fixture
def contract():
    return ds.get_backend("torch"), ds.backends.memory("torch")


# ------------------------------------------------------------------ what an estimate says


def test_an_estimate_of_a_step_that_makes_nothing_is_zero_bytes_on_the_cpu():
    found = _estimate(lambda: None)
    assert (found.peak, found.kept, found.device, found.method) == (0, 0, "cpu", METHOD)
    assert found.details == {"arguments": 0, "peak by device": {}}


def test_an_estimate_names_each_devices_peak_by_the_devices_name():
    found = _estimate(lambda: torch.ones(10))
    assert (found.peak, found.kept, found.device) == (40, 40, "cpu")
    assert found.details == {"arguments": 0, "peak by device": {"cpu": 40}}


def test_the_estimate_is_an_accelerators_before_the_cpus_even_when_the_cpu_held_more():
    """`_figures_of` on a count that held 1000 bytes on the CPU and 10 on a CUDA GPU."""
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    count = SimpleNamespace(peak={cpu: 1000, gpu: 10})
    found = torch_memory._figures_of(count, {cpu: 500, gpu: 4}, {cpu: 100, gpu: 2})
    assert (found["peak"], found["kept"], found["device"]) == (10, 4, "cuda:0")
    assert found["details"] == {"arguments": 2, "peak by device": {"cpu": 1000, "cuda:0": 10}}


def test_a_device_the_step_made_only_empty_tensors_on_is_not_the_estimates():
    """An empty tensor on the meta device holds no byte: the estimate is the CPU's 40 bytes."""
    found = _estimate(lambda: (torch.empty(0, device="meta"), torch.ones(10)))
    assert (found.device, found.peak) == ("cpu", 40)
    assert found.details["peak by device"] == {"cpu": 40}


def test_a_single_byte_is_a_peak():
    found = _estimate(lambda: torch.empty(1, dtype=torch.uint8))
    assert (found.device, found.peak) == ("cpu", 1) and found.details["peak by device"] == {"cpu": 1}


def test_a_storage_resized_in_place_is_counted_at_each_size_it_takes():
    """40 bytes, grown to 400, then to 800, then freed: the peak is 800, none kept."""
    def step():
        t = torch.empty(10)
        t.resize_(100)
        t.add_(1)  # the grown storage met again, at its size
        t.resize_(200)

    found = _estimate(step)
    assert (found.peak, found.kept) == (800, 0)
    assert found.details["peak by device"] == {"cpu": 800}


def test_an_operations_keyword_arguments_reach_it_under_the_count():
    """torch.ones(3, dtype=float64) makes 24 bytes, not float32's 12."""
    assert _estimate(lambda: torch.ones(3, dtype=torch.float64)).peak == 24


def test_tensors_passed_by_keyword_are_counted_as_arguments_and_reach_the_step():
    found = _estimate(lambda x: x * 2, x=torch.ones(10))
    assert (found.peak, found.kept, found.details["arguments"]) == (80, 80, 40)


def test_an_estimate_on_a_torch_without_fake_tensors_is_refused_saying_what_to_do(monkeypatch):
    monkeypatch.setattr(_internals, "FAKE_TENSORS", SimpleNamespace(get=lambda: None))
    with pytest.raises(ds.MemoryEstimateUnsupportedError) as info:
        _estimate(lambda: None)
    assert str(info.value) == (
        f"devshim cannot estimate a step on torch {torch.__version__}: it lacks FakeTensorMode (see the "
        f"FrameworkInternalWarning). Measure it instead: ds.memory_peak on a GPU, or on a virtual GPU of "
        f"the size (DEVSHIM_VIRTUAL_DEVICES=1 DEVSHIM_VIRTUAL_MEMORY=80GB).")


def test_a_cuda_step_where_torch_has_no_cuda_device_is_refused_quoting_torch(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)

    def step():
        raise RuntimeError("Found no NVIDIA driver on your system (CUDA)")

    with pytest.raises(ds.MemoryEstimateError) as info:
        _estimate(step)
    assert str(info.value).endswith("torch said: Found no NVIDIA driver on your system (CUDA)")


def test_a_step_that_made_cuda_tensors_is_taken_as_asking_for_cuda_whatever_torch_said():
    """`_asked_for_cuda`: a count that holds CUDA tensors, an error that does not name CUDA."""
    error = RuntimeError("an operation failed")
    assert torch_memory._asked_for_cuda(SimpleNamespace(peak={torch.device("cuda", 0): 4}), error)
    assert not torch_memory._asked_for_cuda(SimpleNamespace(peak={torch.device("cpu"): 4}), error)


# ------------------------------------------------------------------ a device's figures and its peak counter


def test_the_hosts_bytes_in_use_are_the_processs(contract, monkeypatch):
    adapter, memory = contract
    monkeypatch.setattr(memory_base, "_process_resident", lambda: 12345)
    assert memory.in_use(adapter, torch.device("cpu")) == 12345


def test_the_hosts_peak_counter_is_the_processs_reset(contract, monkeypatch):
    """torch's CPU has no peak of its own: the process's is reset (on Linux)."""
    adapter, memory = contract
    resets: list = []
    monkeypatch.setattr(memory_base, "reset_process_peak", lambda: resets.append(1) or True)
    assert memory.reset_peak(adapter, torch.device("cpu")) is True and resets == [1]


def test_mps_keeps_no_peak_even_where_torch_mps_could_reset_one(contract, monkeypatch):
    """MPS's figures have no peak, so a reset (were torch.mps to offer one) would measure nothing."""
    adapter, memory = contract
    called: list = []
    monkeypatch.setattr(torch.mps, "reset_peak_memory_stats", lambda *args: called.append(args), raising=False)
    assert memory.reset_peak(adapter, torch.device("mps")) is False and called == []


def test_a_device_torch_has_no_module_for_has_no_peak_counter(contract):
    adapter, memory = contract
    assert memory.reset_peak(adapter, torch.device("meta")) is False


# ------------------------------------------------------------------ torch's virtual GPUs


def _in_use(index: int) -> int:
    return ds.memory(f"gpu:{index}").in_use


def test_a_virtual_gpus_reserved_bytes_are_its_bytes_in_use(vgpu):
    x = vgpu.ones(100, device=ds.gpu(1))
    info = ds.memory("gpu:1")
    assert info.reserved == info.in_use and info.in_use >= 400
    del x


def test_the_bytes_in_use_on_virtual_gpu_1_are_gpu_1s(vgpu, contract):
    adapter, memory = contract
    x = vgpu.ones(1000, device=ds.gpu(1))
    assert memory.in_use(adapter, vgpu.device("vgpu", 1)) == _in_use(1) != _in_use(0)
    del x


def test_virtual_gpu_1s_peak_counter_is_reset_on_gpu_1(vgpu, contract):
    adapter, memory = contract
    x = vgpu.ones(1000, device=ds.gpu(1))
    del x
    assert ds.memory("gpu:1").peak > _in_use(1)
    assert memory.reset_peak(adapter, vgpu.device("vgpu", 1)) is True
    assert ds.memory("gpu:1").peak == _in_use(1)


def test_an_allocation_past_a_virtual_gpus_size_says_what_was_free_and_held_before_it(vgpu):
    torch = vgpu
    held = torch.zeros(100, dtype=torch.uint8, device=ds.gpu(1))
    used = _in_use(1)
    settings.set_virtual_memory(used + 100)
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.zeros(1000, dtype=torch.uint8, device=ds.gpu(1))
    assert (f"Tried to allocate 1000 B on vgpu:1, a devshim virtual GPU standing in for a CUDA GPU of "
            f"{format_bytes(used + 100)} (DEVSHIM_VIRTUAL_MEMORY): 100 B is free and {format_bytes(used)} is held "
            f"by live tensors.") in str(info.value)
    settings.set_virtual_memory(used - 50)  # already past the size: nothing is free
    with pytest.raises(torch.OutOfMemoryError, match=f": 0 B is free and {re.escape(format_bytes(used))} is held"):
        torch.zeros(10, dtype=torch.uint8, device=ds.gpu(1))
    assert _in_use(1) == used
    del held


def test_an_allocation_past_the_size_in_a_backward_pass_is_made_counted_and_ends_the_pass(vgpu):
    """A new tensor made in a backward pass past the size is made and counted, and the pass ends in
    torch.OutOfMemoryError, whose free bytes are those before the allocation (at most the 100 left
    when the pass began)."""
    torch = vgpu
    made: list = []

    class Scratch(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, grad):
            made.append(torch.zeros(1000, dtype=torch.uint8, device=ds.gpu(1)))
            return grad

    x = torch.ones(4, device=ds.gpu(1), requires_grad=True)
    loss = Scratch.apply(x).sum()
    used = _in_use(1)
    settings.set_virtual_memory(used + 100)
    with pytest.raises(torch.OutOfMemoryError) as info:
        loss.backward()
    message = str(info.value)
    free = re.search(r": (\d+) B is free and ", message)
    assert "Tried to allocate 1000 B on vgpu:1" in message and free and int(free.group(1)) <= 100, message
    assert len(made) == 1 and _in_use(1) >= used + 1000
    made.clear()
    del x, loss


def test_without_torchs_backward_callbacks_an_allocation_past_the_size_is_refused_at_once(vgpu, monkeypatch):
    """Where torch cannot queue a callback at a backward pass's end, nothing is deferred."""
    torch = vgpu
    from devshim.backends.torch._virtual import memory as virtual_memory

    monkeypatch.setattr(virtual_memory, "_ENGINE", None)
    used = _in_use(1)
    settings.set_virtual_memory(used + 100)
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate 1000 B on vgpu:1"):
        torch.zeros(1000, dtype=torch.uint8, device=ds.gpu(1))
    assert _in_use(1) == used

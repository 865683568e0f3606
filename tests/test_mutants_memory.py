"""`ds.memory`, `ds.memory_peak`, the memory contract and torch's virtual GPUs' count: what they
promise that the mutation env (`tox -e mutation`, tools/mutation.py) found no test holding them
to. Figures are checked against a stand-in where the real one would need a GPU (torch's CUDA and
MPS counts, a framework without `memory.py`), through the contract a backend's `memory.py`
implements (`ds.backends.memory(name)`)."""

from __future__ import annotations

import gc
import re
from types import SimpleNamespace

import numpy as np
import pytest

import devshim as ds
from devshim import backends, device_memory, settings
from devshim._device import Device
from devshim.backends.memory_base import (
    DeviceMemory, HostOnlyMemory, MemoryInfo, buffer_bytes, covered_bytes, format_bytes, live_objects, with_capacity,
)
from helpers import InlineThread as _Inline, TwoGpuDevices

MiB = 2**20


@pytest.fixture(autouse=True)
def _no_size_left_behind():
    yield
    settings.set_virtual_memory(None)


# ------------------------------------------------------------------ what a record says


def test_a_record_reads_as_its_figures_in_units_and_where_they_come_from():
    info = MemoryInfo(Device("gpu", 1), in_use=1536, reserved=3 * MiB, peak=None, total=2**30, free=0,
                      source="a stand-in")
    assert str(info) == "gpu:1: in use 1.5 KiB, reserved 3.0 MiB, total 1.0 GiB, free 0 B (a stand-in)"
    assert str(MemoryInfo(Device("gpu", 0), source="nothing known")) == "gpu:0: no figures (nothing known)"
    assert str(MemoryInfo(Device("cpu"), peak=5)) == "cpu:0: peak 5 B ()"


def test_a_size_takes_the_virtual_gpus_size_and_leaves_what_is_free():
    settings.set_virtual_memory("1KiB")
    info = with_capacity(MemoryInfo(Device("gpu", 0), in_use=100))
    assert (info.total, info.free, info.in_use) == (1024, 924, 100)
    assert with_capacity(MemoryInfo(Device("gpu", 0), in_use=2000)).free == 0  # never below 0
    assert with_capacity(MemoryInfo(Device("gpu", 0))) == MemoryInfo(Device("gpu", 0), total=1024)
    settings.set_virtual_memory(0)
    assert with_capacity(MemoryInfo(Device("gpu", 0), in_use=100)).total is None


# ------------------------------------------------------------------ counting live objects


class _Thing:
    pass


class _OtherThing:
    pass


def test_live_objects_finds_every_instance_of_the_kinds_asked_for_and_nothing_else():
    things = [_Thing(), _Thing()]
    others = [_OtherThing()]
    found = live_objects((_Thing,))
    assert sorted(map(id, found)) == sorted(map(id, things))
    both = live_objects((_Thing, _OtherThing))
    assert sorted(map(id, both)) == sorted(map(id, things + others))
    del things, others, found, both
    gc.collect()
    assert live_objects((_Thing,)) == []


# ------------------------------------------------------------------ a framework without memory.py


class _ToyGpus(TwoGpuDevices, backends.Backend):
    """A framework with two GPUs and no memory.py."""

    spec = backends.BackendSpec("toygpus_memory", import_name=__name__, title="A toy GPU framework")

    def describe(self, native):
        return Device(native[0], native[1], native=native, backend=self.spec.name,
                      virtual=native[0] == "gpu" and bool(settings.virtual_device_count()))


@pytest.fixture
def toy(setenv):
    setenv(settings.VIRTUAL_DEVICES_VAR, None)
    backends.register_backend(_ToyGpus.spec, _ToyGpus)
    yield backends.get_backend(_ToyGpus.spec.name)
    backends.unregister_backend(_ToyGpus.spec.name)


def test_a_framework_without_memory_py_has_the_hosts_figures_and_none_of_its_gpus(toy):
    name = toy.name
    contract = ds.backends.memory(name)
    assert isinstance(contract, HostOnlyMemory)
    gpu = ds.memory("gpu:1", backend=name)
    assert gpu == MemoryInfo(ds.device("gpu:1", backend=name), source=f"the {name} backend has no memory.py: no figures")
    host = ds.memory("cpu", backend=name)
    assert host.source == "this process (resident memory) and the machine"
    assert not contract.is_out_of_memory(MemoryError("out of memory"))
    assert not contract.is_out_of_memory(RuntimeError("CUDA out of memory."))


def test_a_framework_without_memory_py_says_the_same_of_its_virtual_gpus(toy, monkeypatch):
    monkeypatch.setattr(settings, "virtual_device_count", lambda: 2)
    contract = ds.backends.memory(toy.name)
    info = contract.figures(toy, ("gpu", 1))
    assert info.device.virtual and info.in_use is None and info.total is None
    assert info.source == f"the {toy.name} backend has no memory.py: no figures"


def test_a_framework_without_memory_py_cannot_estimate_and_says_what_to_do(toy):
    with pytest.raises(ds.MemoryEstimateUnsupportedError) as info:
        ds.estimate_memory(lambda: None, backend=toy.name)
    message = str(info.value)
    assert "A toy GPU framework step" in message and "ds.memory_peak" in message
    assert "PyTorch (FakeTensorMode) and JAX" in message


class _LiveCount(DeviceMemory):
    """A framework that counts its virtual GPUs' live tensors: 3000 bytes on each."""

    def accelerator_figures(self, adapter, native, device):
        raise AssertionError("the GPUs here are virtual")

    def live_bytes(self, adapter, device):
        return 3000

    def is_out_of_memory(self, error):
        return False


def test_a_virtual_gpus_figures_are_its_live_tensors_against_the_size(toy, monkeypatch):
    monkeypatch.setattr(settings, "virtual_device_count", lambda: 2)
    contract = _LiveCount()
    settings.set_virtual_memory("4KiB")
    info = contract.figures(toy, ("gpu", 0))
    assert (info.in_use, info.total, info.free, info.reserved, info.peak) == (3000, 4096, 1096, None, None)
    assert info.source == "the live tensors devshim finds" and info.device.virtual
    assert contract.in_use(toy, ("gpu", 0)) == 3000
    assert not contract.reset_peak(toy, ("gpu", 0))  # no counter to reset: ds.memory_peak samples
    settings.set_virtual_memory("2KiB")
    assert contract.figures(toy, ("gpu", 0)).free == 0


# ------------------------------------------------------------------ torch's accelerators, stood in for


@pytest.fixture
def torch_contract():
    torch = pytest.importorskip("torch")
    return torch, ds.get_backend("torch"), ds.backends.memory("torch")


def _stand_in(monkeypatch, module, figures: dict, calls: list) -> None:
    """`module`'s memory calls (torch.cuda's, torch.mps's) answering `figures`, recording their arguments."""
    for name, value in figures.items():
        def call(*args, name=name, value=value):
            calls.append((name, args))
            if isinstance(value, Exception):
                raise value
            return value

        monkeypatch.setattr(module, name, call, raising=False)


CUDA_FIGURES = {"memory_allocated": 1000, "memory_reserved": 4096, "max_memory_allocated": 3000,
                "mem_get_info": (5000, 8192)}


@pytest.mark.parametrize("index", [1, None])
def test_torch_gpu_figures_are_its_caching_allocators_own_counts(torch_contract, monkeypatch, index):
    """What `ds.memory("gpu:1")` reads on CUDA: torch.cuda's counts for that GPU (a device
    without an index is GPU 0)."""
    torch, adapter, contract = torch_contract
    calls: list = []
    _stand_in(monkeypatch, torch.cuda, CUDA_FIGURES, calls)
    native = torch.device("cuda", index) if index is not None else torch.device("cuda")
    info = contract.figures(adapter, native)
    assert (info.in_use, info.reserved, info.peak, info.free, info.total) == (1000, 4096, 3000, 5000, 8192)
    assert info.source == "torch.cuda" and info.device.kind == "gpu"
    assert sorted(calls) == sorted((name, (index or 0,)) for name in CUDA_FIGURES)


def test_torch_gpu_figures_a_framework_cannot_give_are_none(torch_contract, monkeypatch):
    torch, adapter, contract = torch_contract
    _stand_in(monkeypatch, torch.cuda, {"memory_allocated": RuntimeError("no CUDA"), "memory_reserved": 4096,
                                        "max_memory_allocated": AssertionError("not compiled with CUDA"),
                                        "mem_get_info": TypeError("an older signature")}, [])
    info = contract.figures(adapter, torch.device("cuda", 0))
    assert (info.in_use, info.reserved, info.peak, info.free, info.total) == (None, 4096, None, None, None)
    monkeypatch.delattr(torch.cuda, "memory_reserved")
    _stand_in(monkeypatch, torch.cuda, {"memory_allocated": ValueError("no such device"),
                                        "mem_get_info": AttributeError("no such call")}, [])
    info = contract.figures(adapter, torch.device("cuda", 0))
    assert (info.in_use, info.reserved, info.free, info.total) == (None, None, None, None)
    _stand_in(monkeypatch, torch.cuda, {"memory_allocated": KeyError("not a framework's answer")}, [])
    with pytest.raises(KeyError):
        contract.figures(adapter, torch.device("cuda", 0))


def test_torch_mps_figures_are_metals_counts(torch_contract, monkeypatch):
    torch, adapter, contract = torch_contract
    calls: list = []
    _stand_in(monkeypatch, torch.mps, {"current_allocated_memory": 700, "driver_allocated_memory": 2048,
                                       "recommended_max_memory": 10**6}, calls)
    info = contract.figures(adapter, torch.device("mps"))
    assert (info.in_use, info.reserved, info.total, info.peak, info.free) == (700, 2048, 10**6, None, None)
    assert info.source == "torch.mps" and all(args == () for _, args in calls) and len(calls) == 3


@pytest.mark.parametrize("index", [1, None])
def test_a_torch_gpus_peak_counter_is_reset_for_that_gpu(torch_contract, monkeypatch, index):
    torch, adapter, contract = torch_contract
    calls: list = []
    _stand_in(monkeypatch, torch.cuda, {"reset_peak_memory_stats": None}, calls)
    native = torch.device("cuda", index) if index is not None else torch.device("cuda")
    assert contract.reset_peak(adapter, native) is True and calls == [("reset_peak_memory_stats", (index or 0,))]
    for refusal in (RuntimeError("no CUDA"), AssertionError("not compiled with CUDA")):
        _stand_in(monkeypatch, torch.cuda, {"reset_peak_memory_stats": refusal}, [])
        assert contract.reset_peak(adapter, native) is False
    monkeypatch.delattr(torch.cuda, "reset_peak_memory_stats")
    assert contract.reset_peak(adapter, native) is False
    assert contract.reset_peak(adapter, torch.device("mps")) is False  # MPS keeps no peak


def test_a_torch_error_names_its_gpu_by_index_as_cuda_words_it(torch_contract):
    torch, backend, contract = torch_contract
    said = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 80 GiB")
    assert contract.names_device(said, torch.device("cuda", 1))
    assert not contract.names_device(said, torch.device("cuda", 0))
    assert contract.names_device(torch.OutOfMemoryError("... GPU 0 has a total ..."), torch.device("cuda"))
    for native in ds.devices(backend="torch")[1:]:
        if native.type != "cuda" and native.index == 1:  # a virtual GPU 1: the words are CUDA's alone
            assert not contract.names_device(said, native)
            assert contract.names_device(torch.OutOfMemoryError(f"{native} out of memory."), native)


@pytest.mark.parametrize("said, meant", [
    ("MPS backend out of memory (MPS allocated: 1.00 GB)", True),
    ("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried ...", True),
    ("CUDA OUT OF MEMORY", True),
    ("the step ran out of patience", False),
])
def test_torch_says_out_of_memory_in_runtime_errors_of_its_own_too(torch_contract, said, meant):
    torch, _, contract = torch_contract
    assert contract.is_out_of_memory(RuntimeError(said)) is meant
    assert contract.is_out_of_memory(torch.OutOfMemoryError("anything"))
    assert not contract.is_out_of_memory(ValueError(said))  # a RuntimeError of torch's, not any error


def test_a_torch_models_bytes_count_each_parameter_and_buffer_once(torch_contract):
    torch, _, contract = torch_contract
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    shared = torch.nn.Linear(4, 4, bias=False)
    tied = torch.nn.Sequential(shared, shared)  # one weight, met twice
    assert contract.model_bytes(net) == 4 * (4 * 3 + 3 + 3 + 3 + 3 + 3) + 8  # + num_batches_tracked (int64)
    assert contract.model_bytes(tied) == 4 * 16
    assert contract.model_bytes("not a model") is None
    assert contract.nbytes(torch.ones(5)) == 20 and contract.nbytes(np.ones(5)) is None


# ------------------------------------------------------------------ a virtual tensor's storage


@pytest.fixture
def vgpu_storage(vgpu):
    """A uint8 tensor of four zeros on torch's virtual gpu:0 (two virtual GPUs for this test)."""
    return vgpu, vgpu.zeros(4, dtype=vgpu.uint8, device=ds.gpu(0))


def test_a_virtual_storage_is_written_through_to_its_tensor(vgpu_storage):
    torch, t = vgpu_storage
    storage = t.untyped_storage()
    assert storage.fill_(7) is storage and t.tolist() == [7, 7, 7, 7]
    storage[1] = 9
    assert storage[1] == 9 and t.tolist() == [7, 9, 7, 7]
    other = torch.arange(4, dtype=torch.uint8, device=ds.gpu(1)).untyped_storage()
    assert storage.copy_(other) is storage and t.tolist() == [0, 1, 2, 3]
    assert storage.copy_(torch.full((4,), 5, dtype=torch.uint8).untyped_storage()) is storage
    assert t.tolist() == [5, 5, 5, 5]
    assert (storage.size(), len(storage), storage.nbytes()) == (4, 4, 4)


def test_a_virtual_storage_moves_as_a_host_copy_and_stays_itself_on_its_own_device(vgpu_storage):
    torch, t = vgpu_storage
    storage = t.untyped_storage()
    storage.fill_(3)
    assert storage.to(device=storage.device) is storage
    assert storage.to(device=ds.gpu(0)) is storage  # the same device, named another way
    for copy in (storage.to(device="cpu"), storage.cpu(), storage.clone()):
        assert copy.device == torch.device("cpu") and copy.tolist() == [3, 3, 3, 3]
        copy.fill_(1)
        assert t.tolist() == [3, 3, 3, 3]  # a copy: the tensor is left alone
    fresh = storage.new()
    assert fresh.nbytes() == 0 and fresh.device == torch.device("cpu")


def test_a_virtual_storage_resized_in_place_is_copied_from_at_its_new_size(vgpu_storage):
    """The storage torch sees for a virtual tensor is made over its host's memory at the size it
    had then: a copy from it after its resize_ must read the host storage, not that one."""
    torch, t = vgpu_storage
    source = torch.arange(4, dtype=torch.uint8, device=ds.gpu(1)).untyped_storage()
    source.resize_(4096)  # new host memory, 4096 bytes
    source.fill_(5)
    target = torch.zeros(4096, dtype=torch.uint8, device=ds.gpu(0))
    assert target.untyped_storage().copy_(source) is not None
    assert int(target.sum()) == 5 * 4096


# ------------------------------------------------------------------ what the contract asks and answers


class _AskedLive(_LiveCount):
    """Live tensors counted per virtual GPU (1000 bytes on gpu:0, 2000 on gpu:1), noting who asked."""

    def __init__(self) -> None:
        self.asked: list = []

    def live_bytes(self, adapter, device):
        self.asked.append((adapter, device))
        return 1000 * (device.index + 1)


def test_a_virtual_gpus_live_tensors_are_asked_of_its_framework_for_that_gpu(toy, monkeypatch):
    monkeypatch.setattr(settings, "virtual_device_count", lambda: 2)
    contract = _AskedLive()
    info = contract.figures(toy, ("gpu", 1))
    assert info.in_use == 2000 and contract.asked == [(toy, info.device)]


class _KnowsItsGpus(HostOnlyMemory):
    """A memory.py that knows its real GPUs' use (100 bytes a GPU index) and keeps HostOnlyMemory's
    answer for its virtual ones."""

    def accelerator_figures(self, adapter, native, device):
        return MemoryInfo(device, in_use=100 * native[1], source=f"asked of {native}")


def test_a_host_only_contract_answers_for_a_virtual_gpu_as_for_that_accelerator(toy, monkeypatch):
    monkeypatch.setattr(settings, "virtual_device_count", lambda: 2)
    info = _KnowsItsGpus().figures(toy, ("gpu", 1))
    assert info.device.virtual and (info.in_use, info.source) == (100, "asked of ('gpu', 1)")


class _Sized:
    def __init__(self, nbytes) -> None:
        self.nbytes = nbytes


def test_a_tensors_bytes_are_its_nbytes_only_when_that_is_a_whole_number():
    """DeviceMemory's own nbytes (a framework's memory.py that does not override it)."""
    contract = HostOnlyMemory()
    assert contract.nbytes(_Sized(12)) == 12 and contract.nbytes(np.ones(3)) == 24
    for odd in (True, 2.5, "12", None, lambda: 12):  # a flag, a float, text, nothing, a method
        assert contract.nbytes(_Sized(odd)) is None, odd
    assert contract.nbytes(object()) is None  # no nbytes at all


def test_overlapping_ranges_count_each_byte_once_however_they_chain():
    assert covered_bytes([(0, 100), (50, 150)]) == 150
    assert covered_bytes([(50, 150), (0, 100), (120, 200)]) == 200  # each overlapping the one before
    assert covered_bytes([(0, 100), (100, 150), (120, 130), (300, 310)]) == 160  # adjacent, inside, apart



def test_buffers_count_each_byte_once_and_those_without_an_address_on_their_own():
    """JAX's and MXNet's figures of what a device holds: (start, size) of each buffer."""
    assert buffer_bytes([(0, 100), (50, 100), (None, 10)]) == 160
    assert buffer_bytes(iter([(None, 7), (1000, 5), (None, 3)])) == 15  # a generator, read once
    assert buffer_bytes([(10, 30), (20, 30)]) == 40 and buffer_bytes([]) == 0

# ------------------------------------------------------------------ a sampled peak, on a scripted clock
# ds.memory_peak where the framework keeps no peak counter: a thread reads the bytes in use. Here
# the readings follow a script (bytes, or an exception: a reading that fails; and the seconds it
# takes), on a clock that only the readings move, and the sampler runs when the block opens, for
# as many readings as each block is given: its figures and its waits are then exact.


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class _ScriptedReadings:
    """A memory contract with no peak counter whose readings follow `script`: (bytes, seconds)."""

    def __init__(self, clock: _Clock, script: list) -> None:
        self.clock, self.script = clock, list(script)

    def figures(self, adapter, native):
        return MemoryInfo(adapter.describe(native))

    def reset_peak(self, adapter, native):
        return False

    def in_use(self, adapter, native):
        value, seconds = self.script.pop(0)
        self.clock.now += seconds
        if isinstance(value, Exception):
            raise value
        return value


class _Stop:
    """A sampler's stop event: `samples` waits end in a reading, the next in stopping; `waits`
    are the intervals it waited."""

    def __init__(self, samples: int) -> None:
        self.left, self.waits = samples, []

    def wait(self, timeout) -> bool:
        self.waits.append(timeout)
        self.left -= 1
        return self.left < 0

    def set(self) -> None:
        pass


@pytest.fixture
def scripted(monkeypatch):
    """``scripted(script, *samples)``: NumPy's memory contract replaced by `_ScriptedReadings`, each
    ``ds.memory_peak`` block opened next sampling ``samples[i]`` times; gives their `_Stop`s. A
    script lists the block's first reading, its samples and its last (nested blocks in order)."""
    from devshim.backends import registry

    def use(script, *samples):
        clock = _Clock()
        registry.memory("numpy")  # made first, so the stand-in replaces it
        monkeypatch.setitem(registry._contracts, ("numpy", "memory"), _ScriptedReadings(clock, script))
        stops = [_Stop(n) for n in samples]
        made = iter(stops)
        monkeypatch.setattr(device_memory, "threading", SimpleNamespace(Event=lambda: next(made), Thread=_Inline))
        monkeypatch.setattr(device_memory, "time", SimpleNamespace(perf_counter=clock.perf_counter))
        return stops

    return use


def _block():
    return ds.memory_peak("cpu", backend="numpy", interval=0.002)


def test_a_sampled_peak_is_the_most_of_its_readings_each_counted_once(scripted):
    scripted([(100, 0.001), (100, 0.001), (900, 0.001), (200, 0.001), (100, 0.001)], 3)
    with _block() as peak:
        pass
    assert (peak.method, peak.peak, peak.start, peak.end, peak.added) == ("sampled", 900, 100, 100, 800)
    assert (peak.readings, peak.missed, peak.reason) == (3, 0, "")
    assert peak.resolution == pytest.approx(0.002)  # from one reading's start to the next one's end


def test_a_sampled_peak_counts_the_readings_that_failed_and_reads_on_after_them(scripted):
    failed = RuntimeError("the framework could not say")
    scripted([(0, 0.001), (failed, 0.001), (failed, 0.001), (500, 0.001), (0, 0.001)], 3)
    with _block() as peak:
        pass
    assert (peak.peak, peak.readings, peak.missed, peak.reason) == (500, 3, 2, "")
    assert peak.resolution == pytest.approx(0.004)  # the failed readings' time is time unseen


def test_a_sampler_waits_longer_when_a_reading_is_slow_up_to_what_the_resolution_allows(scripted):
    """Ten times a reading's time between two (a tenth of a core), not less than the interval asked
    for, and no more than leaves RESOLUTION / 2 from one reading's start to the next one's end,
    unless the reading itself takes more than that half: then a tenth of a core again."""
    took = [0.025, 0.0001, 0.002, 0.01, 0.03]  # (0.025 first, on a clock at 0: 0.1 / 2 - 0.025 is 0.025 exactly)
    (stop,) = scripted([(0, 0.0), *((0, t) for t in took), (0, 0.0)], len(took))
    with _block():
        pass
    assert stop.waits == pytest.approx([0.002,  # the interval asked for, to begin with
                                        0.025,  # 0.025 s: the wait that leaves RESOLUTION / 2 is as long
                                        0.002,  # 0.0001 s: ten times that is under the interval asked for
                                        0.02,   # 0.002 s: ten times that
                                        0.04,   # 0.01 s: RESOLUTION / 2 less the reading, under ten times it
                                        0.3])   # 0.03 s: more than RESOLUTION / 2 less itself: ten times it


def test_a_sampled_peak_whose_readings_were_exactly_the_resolution_apart_is_given(scripted):
    scripted([(0, 0.0), (700, 0.1), (0, 0.0)], 1)
    with _block() as peak:
        pass
    assert peak.resolution == device_memory.RESOLUTION and (peak.peak, peak.reason) == (700, "")


def test_a_sampled_peak_with_a_slow_reading_is_none_and_says_why_in_full(scripted):
    scripted([(0, 0.001), (1000, 0.15), (0, 0.001)], 1)
    with _block() as peak:
        pass
    assert peak.peak is None and peak.readings == 1 and peak.resolution == pytest.approx(0.151)
    assert peak.reason == (
        f"the readings of what is in use on {peak.device} were up to 0.15 s apart, so a tensor held for less than "
        f"that could have been missed (the most seen was 1000 B). Hold the block longer than that, or measure on a "
        f"device whose framework keeps a peak counter.")


def test_a_sampled_peak_none_for_failed_readings_says_how_many_failed(scripted):
    failed = RuntimeError("the framework could not say")
    scripted([(0, 0.001), (failed, 0.06), (failed, 0.06), (300, 0.001), (0, 0.001)], 3)
    with _block() as peak:
        pass
    assert peak.peak is None and peak.resolution == pytest.approx(0.122)
    assert "were up to 0.12 s apart; 2 of its 3 readings failed, so a tensor" in peak.reason
    assert "(the most seen was 300 B)" in peak.reason


def test_an_outer_sampled_peak_keeps_what_a_block_nested_in_it_read(scripted):
    """The outer sampler read 100 each time; the inner one read 900 between its readings."""
    scripted([(100, 0.001), (100, 0.001),                   # outer: start, one sample
              (100, 0.001), (900, 0.001), (100, 0.001),     # inner: start, one sample, end
              (100, 0.001)], 1, 1)                          # outer: end
    with _block() as outer:
        with _block() as inner:
            pass
    assert (inner.method, inner.peak) == ("sampled", 900)
    assert (outer.method, outer.peak, outer.start, outer.end) == ("sampled", 900, 100, 100)


# ------------------------------------------------------------------ torch: what a step or a device says


def test_torchs_meta_device_has_no_figures_and_says_where_they_would_come_from(torch_contract):
    torch, _, _ = torch_contract
    info = ds.memory(torch.device("meta"), backend="torch")  # no torch.meta module to ask
    assert (info.in_use, info.reserved, info.peak, info.total, info.free) == (None,) * 5
    assert info.source == "torch.meta" and info.device.kind == "meta"


def test_torch_mps_figures_are_for_the_mps_device(torch_contract, monkeypatch):
    torch, adapter, contract = torch_contract
    _stand_in(monkeypatch, torch.mps, {"current_allocated_memory": 700, "driver_allocated_memory": 2048,
                                       "recommended_max_memory": 10**6}, [])
    native = torch.device("mps")
    assert contract.figures(adapter, native).device == adapter.describe(native)


def test_a_torch_estimate_that_reads_a_value_names_the_operation(torch_contract):
    torch, _, _ = torch_contract
    with pytest.raises(ds.MemoryEstimateError) as info:
        ds.estimate_memory(lambda: torch.ones(3).sum().item(), backend="torch")
    said = str(info.value)  # "... value in <lambda>() at test_mutants_memory.py:574 (aten._local_scalar_dense..."
    assert said.startswith("the step read a tensor's value in ") and " (aten._local_scalar_dense.default: .item()" in said


def test_a_torch_estimate_names_a_value_read_error_without_arguments_by_its_kind(torch_contract):
    """torch's fake-tensor errors are dataclasses: one made with a keyword has no args."""
    torch, _, _ = torch_contract
    from torch._subclasses.fake_tensor import DynamicOutputShapeException

    def step():
        raise DynamicOutputShapeException(func=torch.ops.aten.nonzero.default)

    with pytest.raises(ds.MemoryEstimateError) as info:
        ds.estimate_memory(step, backend="torch")
    said = str(info.value)
    assert said.startswith("the step read a tensor's value in ") and " (DynamicOutputShapeException: .item()" in said


# ------------------------------------------------------------------ a virtual GPU's size, in place


def _in_use(index: int) -> int:
    return ds.memory(f"gpu:{index}").in_use


def test_a_tensor_grown_in_place_past_the_size_is_held_and_refused_in_cudas_words(vgpu):
    """The growth is counted (the memory is held) and the error says what was free before it."""
    torch = vgpu
    x = torch.zeros(10, dtype=torch.uint8, device=ds.gpu(1))
    used = _in_use(1)
    settings.set_virtual_memory(used + 100)
    with pytest.raises(torch.OutOfMemoryError) as info:
        x.resize_(300)  # 290 bytes more, 100 free
    assert str(info.value).startswith(
        f"vgpu:1 out of memory. Tried to allocate 290 B on vgpu:1, a devshim virtual GPU standing in for a CUDA GPU "
        f"of {format_bytes(used + 100)} (DEVSHIM_VIRTUAL_MEMORY): 100 B is free and {format_bytes(used)} is held by live tensors.")
    assert x.numel() == 300 and _in_use(1) == used + 290
    del x


def test_a_tensor_grows_in_place_to_exactly_the_size_and_not_a_byte_past_it(vgpu):
    torch = vgpu
    x = torch.zeros(10, dtype=torch.uint8, device=ds.gpu(1))
    used = _in_use(1)
    settings.set_virtual_memory(used + 20)
    x.resize_(30)  # exactly the size
    assert _in_use(1) == used + 20
    with pytest.raises(torch.OutOfMemoryError, match=r"Tried to allocate 1 B on vgpu:1"):
        x.resize_(31)
    del x


def test_a_gpu_past_its_size_still_reshapes_and_shrinks_a_tensor_in_place(vgpu):
    """The size made smaller than what is held: what does not grow is never refused."""
    torch = vgpu
    x = torch.zeros(100, dtype=torch.uint8, device=ds.gpu(1))
    used = _in_use(1)
    settings.set_virtual_memory(used - 50)
    x.resize_(100)
    x.resize_(10, 10)
    x.resize_(50)
    assert _in_use(1) == used and x.shape == (50,)  # (torch keeps the storage a tensor's resize_ shrinks)
    del x


class _GrowsInBackward:
    """A step whose backward pass grows `buffer` (on gpu:1) to 300 bytes in place."""

    def __init__(self, torch) -> None:
        buffer = self.buffer = torch.zeros(10, dtype=torch.uint8, device=ds.gpu(1))

        class Grow(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 1

            @staticmethod
            def backward(ctx, grad):
                buffer.resize_(300)
                return grad

        self.grow = Grow


def test_a_tensor_grown_past_the_size_in_a_backward_pass_ends_it_saying_what_was_free(vgpu):
    """As outside one (the growth counted, what was free before it said), at the pass's end."""
    torch = vgpu
    step = _GrowsInBackward(torch)
    x = torch.ones(4, device=ds.gpu(1), requires_grad=True)
    loss = step.grow.apply(x).sum()
    settings.set_virtual_memory(_in_use(1) + 100)
    with pytest.raises(torch.OutOfMemoryError) as info:
        loss.backward()
    message = str(info.value)
    free = re.search(r": (\d+) B is free and ", message)
    assert "Tried to allocate 290 B on vgpu:1" in message and free and 0 < int(free.group(1)) <= 100, message
    assert step.buffer.numel() == 300
    del step, x, loss


def test_a_storage_resized_on_gpu_1_is_counted_on_gpu_1(vgpu):
    torch = vgpu
    t = torch.zeros(16, dtype=torch.uint8, device=ds.gpu(1))
    storage = t.untyped_storage()
    before = _in_use(0), _in_use(1)
    storage.resize_(64)
    assert (_in_use(0), _in_use(1)) == (before[0], before[1] + 48)
    storage.resize_(0)
    assert (_in_use(0), _in_use(1)) == (before[0], before[1] - 16)
    del t, storage


def test_a_storage_resizes_to_exactly_the_size_and_not_a_byte_past_it(vgpu):
    torch = vgpu
    t = torch.zeros(16, dtype=torch.uint8, device=ds.gpu(1))
    storage = t.untyped_storage()
    used = _in_use(1)
    settings.set_virtual_memory(used + 16)
    storage.resize_(32)  # exactly the size
    with pytest.raises(torch.OutOfMemoryError, match=r"Tried to allocate 1 B on vgpu:1"):
        storage.resize_(33)
    assert storage.nbytes() == 32 and _in_use(1) == used + 16
    settings.set_virtual_memory(used)  # now past it: what does not grow is not refused
    storage.resize_(32)
    storage.resize_(8)
    assert storage.nbytes() == 8 and _in_use(1) == used - 8
    del t, storage

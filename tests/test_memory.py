"""What is specific to memory: the size setting, peaks taken each way, and torch's virtual GPUs,
where devshim sees every allocation (a size set refuses one past it with torch's own
out-of-memory error). What every backend must do is in tests/devshim_conformance/test_contract_memory.py.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import re
import time
import warnings

import numpy as np
import pytest

import devshim as ds
from devshim import settings
from devshim.backends.memory_base import MemoryInfo, covered_bytes, format_bytes
from devshim.device_memory import RESOLUTION
from helpers import run_python

pytest_plugins = ["pytester"]

MiB = 2**20


@pytest.fixture(autouse=True)
def _no_size_left_behind():
    yield
    settings.set_virtual_memory(None)


# ------------------------------------------------------------ the size of a virtual GPU


@pytest.mark.parametrize("text, size", [
    ("64MiB", 64 * MiB), ("64 MiB", 64 * MiB), ("1GB", 10**9), ("1.5G", 3 * 2**29), ("2k", 2048),
    ("1000", 1000), (4096, 4096), ("16gib", 16 * 2**30), ("1e3", 1000),
])
def test_sizes_are_read_with_their_units(text, size):
    assert settings.parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "-1MiB", "0", "12 parsecs", "", "1.5.2G", True, "1e400", "1e400GiB", -5,
                                  "nan", "inf", "-0.5"])
def test_a_value_that_is_no_size_is_refused_by_name(text):
    with pytest.raises(ds.VirtualMemorySizeError, match="DEVSHIM_VIRTUAL_MEMORY") as info:
        settings.parse_size(text)
    assert isinstance(info.value, ValueError) and "64MiB" in str(info.value)


def test_the_size_comes_from_the_environment_and_set_virtual_memory_wins(setenv):
    setenv(settings.VIRTUAL_MEMORY_VAR, None)
    assert settings.virtual_memory() is None
    setenv(settings.VIRTUAL_MEMORY_VAR, "64MiB")
    assert settings.virtual_memory() == 64 * MiB
    settings.set_virtual_memory("1GiB")
    assert settings.virtual_memory() == 2**30
    settings.set_virtual_memory(0)  # no size, whatever the environment says
    assert settings.virtual_memory() is None
    settings.set_virtual_memory(None)  # the environment's again
    assert settings.virtual_memory() == 64 * MiB
    setenv(settings.VIRTUAL_MEMORY_VAR, "huge")
    with pytest.raises(ds.VirtualMemorySizeError):
        settings.virtual_memory()


def test_a_size_without_virtual_devices_warns_what_to_add(setenv):
    settings.set_virtual_devices(None)  # the count from the environment (conftest puts it back)
    setenv(settings.VIRTUAL_DEVICES_VAR, None)
    setenv(settings.VIRTUAL_MEMORY_VAR, "64MiB")
    with pytest.warns(ds.VirtualMemoryWithoutDevicesWarning, match="Add DEVSHIM_VIRTUAL_DEVICES=1"):
        assert settings.virtual_device_count() == 0
    setenv(settings.VIRTUAL_DEVICES_VAR, "2")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ds.VirtualMemoryWithoutDevicesWarning)
        assert settings.virtual_device_count() == 2


def test_covered_bytes_counts_overlapping_ranges_once():
    assert covered_bytes([]) == 0
    assert covered_bytes([(0, 100), (50, 150), (200, 210)]) == 160
    assert covered_bytes([(0, 100), (10, 20)]) == 100


def test_byte_counts_read_for_people():
    assert format_bytes(None) == "unknown" and format_bytes(512) == "512 B"
    assert format_bytes(64 * MiB) == "64.0 MiB" and format_bytes(3 * 2**30) == "3.0 GiB"


def test_info_names_the_cpu_in_devshim_info(capsys):
    from devshim import cli

    assert cli.main(["info"]) in (0, 2)
    out = capsys.readouterr().out
    assert "memory (ds.memory" in out
    host = ds.memory("cpu")
    if host.total is not None:
        assert format_bytes(host.total) in out


# ------------------------------------------------------------ peaks, each way


class _Counts:
    """A stand-in framework's counts: ``used`` in use, ``top`` its peak counter (None: none)."""

    def __init__(self, resets: bool, top=0) -> None:
        self.used, self.top, self.resets = 0, top, resets

    def figures(self, adapter, native):
        return MemoryInfo(adapter.describe(native), in_use=self.used, peak=self.top)

    def in_use(self, adapter, native):
        return self.used

    def reset_peak(self, adapter, native):
        if self.resets:
            self.top = self.used
        return self.resets

    def use(self, amount: int) -> None:
        self.used += amount
        if self.top is not None:
            self.top = max(self.top, self.used)


@pytest.fixture
def counted(monkeypatch):
    """``counted(counts)``: NumPy's memory contract (the host's) replaced by ``counts`` for this
    test; gives a function that opens a ``ds.memory_peak`` block on it."""
    from devshim.backends import registry

    def use(counts):
        registry.memory("numpy")  # made first, so the stand-in replaces it
        monkeypatch.setitem(registry._contracts, ("numpy", "memory"), counts)
        return lambda interval=0.001: ds.memory_peak("cpu", backend="numpy", interval=interval)

    return use


def _until_read(peak, value) -> None:
    deadline = time.monotonic() + 5
    while peak._seen != value and time.monotonic() < deadline:  # until the sampler has read it
        time.sleep(0.001)


def test_a_resettable_counter_gives_each_nested_block_its_own_peak(counted):
    counts = _Counts(resets=True)
    block = counted(counts)
    counts.use(100)
    with block() as outer:
        counts.use(50), counts.use(-50)                   # outer alone: 150
        with block() as inner:                            # resets the counter to 100
            counts.use(20), counts.use(-20)               # inner: 120
        counts.use(5)
    assert (inner.method, inner.peak, inner.added) == ("reset", 120, 20)
    assert (outer.method, outer.peak, outer.start, outer.end) == ("reset", 150, 100, 105)
    assert outer.resolution == inner.resolution == 0.0 and not outer.reason


def test_a_counter_that_cannot_be_reset_gives_the_peak_when_it_rose(counted):
    counts = _Counts(resets=False, top=500)
    block = counted(counts)
    counts.use(100)
    with block() as rose:
        counts.use(700), counts.use(-700)
    assert (rose.method, rose.peak) == ("counter", 800)
    with block() as below:  # under the old peak: sampled instead
        counts.use(10)
    assert below.method == "sampled" and below.peak == 110


def test_nested_peaks_never_exceed_the_truth_with_a_counter_that_cannot_be_reset(counted):
    """The process's old high (1000 bytes, long before) is no block's peak, however they nest."""
    counts = _Counts(resets=False, top=1000)
    block = counted(counts)
    with block() as outer:
        with block() as inner:
            counts.use(100)
            _until_read(inner, 100)
            _until_read(outer, 100)
            counts.use(-100)
        with block() as second:
            counts.use(30), counts.use(-30)
    for peak in (outer, inner):
        assert (peak.method, peak.peak, peak.added) == ("sampled", 100, 100), peak
    assert second.peak is not None and second.peak <= 30
    with block() as outer:  # a rise past the old high, inside nested blocks: the counter, exact in both
        with block() as inner:
            counts.use(1500), counts.use(-1500)
    assert (outer.method, outer.peak) == (inner.method, inner.peak) == ("counter", 1500)


class _Failing(_Counts):
    """Counts whose readings fail (or take `slow` seconds each) once `fail` is set."""

    def __init__(self, slow: float = 0.0) -> None:
        super().__init__(resets=False, top=None)
        self.fail, self.slow = False, slow

    def in_use(self, adapter, native):
        if self.fail:
            if not self.slow:
                raise RuntimeError("the framework could not say")
            time.sleep(self.slow)
        return self.used


@pytest.mark.parametrize("slow", [0.0, 0.15])
def test_a_sampled_peak_that_could_have_missed_a_tensor_is_none_with_the_reason(counted, slow):
    counts = _Failing(slow=slow)
    block = counted(counts)
    with block() as peak:
        counts.fail = True
        counts.use(1000)  # held 0.3 s, while every reading fails (or each takes 0.15 s)
        time.sleep(0.3)
        counts.use(-1000)
        counts.fail = slow > 0  # the end is read (slowly), or fails too
    assert peak.method == "sampled" and peak.peak is None and peak.resolution > 0.1
    assert f"{peak.resolution:.2f} s apart" in peak.reason and "could have been missed" in peak.reason
    if not slow:
        # (a reading or two may come before the failures start or after they end)
        assert 0 < peak.missed <= peak.readings and f"{peak.missed} of its {peak.readings} readings failed" in peak.reason


def test_without_a_counter_a_thread_samples_what_is_in_use(counted):
    """The figure the sampler read; on a machine so busy that its thread waited past the
    resolution between two readings (seen once while five test runs shared two cores), the
    block says so instead (the case of the test above), and it is measured again."""
    counts = _Counts(resets=False, top=None)
    for _ in range(5):
        with counted(counts)(interval=0.001) as peak:
            counts.use(1000)
            _until_read(peak, 1000)
            counts.use(-1000)
        if peak.resolution <= RESOLUTION:
            break
        assert peak.peak is None and "could have been missed" in peak.reason, peak
    assert (peak.method, peak.peak, peak.start, peak.end) == ("sampled", 1000, 0, 0)
    assert 0 < peak.resolution <= RESOLUTION and peak.missed == 0 and not peak.reason


# ------------------------------------------------------------ torch's virtual GPUs


def test_a_64_mib_virtual_gpu_refuses_a_100_mib_tensor_with_torchs_own_error(vgpu):
    torch = vgpu
    settings.set_virtual_memory("64MiB")
    before = ds.memory("gpu:0").in_use
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(100 * MiB, dtype=torch.uint8, device=ds.gpu(0))
    message = str(info.value)
    assert "vgpu:0" in message and "100.0 MiB" in message and "64.0 MiB" in message
    assert "DEVSHIM_VIRTUAL_MEMORY" in message
    assert ds.memory("gpu:0").in_use == before  # nothing was kept
    kept = torch.empty(40 * MiB, dtype=torch.uint8, device=ds.gpu(0))  # what fits still fits
    with pytest.raises(torch.OutOfMemoryError):  # but not twice
        torch.ones(40 * MiB, dtype=torch.uint8, device=ds.gpu(0))
    other = torch.empty(40 * MiB, dtype=torch.uint8, device=ds.gpu(1))  # each GPU has its own 64 MiB
    info = ds.memory("gpu:0")
    assert (info.total, info.in_use, info.free) == (64 * MiB, before + 40 * MiB, 24 * MiB - before)
    del kept, other


def test_operations_results_count_too_and_are_refused_past_the_size(vgpu):
    torch = vgpu
    x = torch.ones(4 * MiB, device=ds.gpu(0))  # 16 MiB
    settings.set_virtual_memory(ds.memory("gpu:0").in_use + 20 * MiB)
    y = x * 2  # 16 MiB more: fits
    with pytest.raises(torch.OutOfMemoryError):
        x + y  # and 16 MiB more does not
    x.mul_(3)  # in place: no new memory
    del x, y


def test_views_and_shared_storage_count_once_and_go_with_their_last_tensor(vgpu):
    torch = vgpu
    before = ds.memory("gpu:1").in_use
    x = torch.zeros(1000, device=ds.gpu(1))
    views = [x[10:], x.view(10, 100), x.t() if x.dim() == 2 else x.unsqueeze(0), x.detach()]
    assert ds.memory("gpu:1").in_use - before == 4000
    del x
    assert ds.memory("gpu:1").in_use - before == 4000  # the views hold the storage
    del views
    assert ds.memory("gpu:1").in_use == before


def test_a_tensor_grown_in_place_is_counted_at_its_new_size(vgpu):
    torch = vgpu
    before = ds.memory("gpu:0").in_use
    x = torch.zeros(10, device=ds.gpu(0))
    x.resize_(1000)
    assert ds.memory("gpu:0").in_use - before == 4000
    out = torch.empty(0, device=ds.gpu(0))
    torch.add(x, 1, out=out)  # out= grows to 1000 elements
    assert ds.memory("gpu:0").in_use - before == 8000
    del x, out
    assert ds.memory("gpu:0").in_use == before


def test_a_peak_on_a_virtual_gpu_is_reset_and_exact(vgpu):
    torch = vgpu
    with ds.memory_peak("gpu:0") as peak:
        a = torch.ones(MiB, device=ds.gpu(0))
        b = a * 2
        del a, b
        c = torch.ones(MiB // 2, device=ds.gpu(0))
    assert peak.method == "reset" and peak.added == 8 * MiB and peak.end - peak.start == 2 * MiB
    del c


# A small model whose inference peak can be counted by hand: Linear(I, H), ReLU, Linear(H, O),
# no biases, under no_grad. nn.Sequential keeps each layer's input until the next layer's output
# exists, so the peak (H >= O) is the weights, the batch, and two (B, H) activations at once:
# the first linear's output while ReLU makes its own.
I_, H_, O_ = 256, 128, 10


def _hand_count_largest_batch(capacity: int, weights: int) -> int:
    per_example = 4 * (I_ + 2 * H_)  # float32: the input row, the hidden row, ReLU's row
    return (capacity - weights) // per_example


def test_the_largest_batch_that_fits_is_the_one_a_hand_count_of_the_bytes_gives(vgpu):
    torch = vgpu
    nn = torch.nn
    device = ds.gpu(0)
    model = ds.place_model(nn.Sequential(nn.Linear(I_, H_, bias=False), nn.ReLU(),
                                         nn.Linear(H_, O_, bias=False)), device)
    weights = 4 * (I_ * H_ + H_ * O_)
    base = ds.memory(device).in_use  # the model, and whatever else lives on gpu:0
    capacity = base + 3 * MiB
    settings.set_virtual_memory(capacity)

    def fits(batch: int) -> bool:
        try:
            x = ds.to_device(torch.randn(batch, I_), device)
            with torch.no_grad():
                model(x)
        except (torch.OutOfMemoryError, ds.DeviceOutOfMemoryError):
            return False
        return True

    low, high = 1, 2
    while fits(high):
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    assert low == _hand_count_largest_batch(capacity - (base - weights), weights)
    settings.set_virtual_memory(0)
    with ds.memory_peak(device) as peak:
        fits(low)
    assert peak.added == 4 * low * (I_ + 2 * H_)  # the measured peak agrees, byte for byte


def test_the_capacity_holds_under_threads(vgpu):
    """8 threads, 100 rounds, each thread taking chunks until it is refused, with a tiny switch
    interval: together they get exactly the chunks that fit, and what is in use never passes the
    size (the check against the size and the count are one step)."""
    import sys
    import threading

    torch = vgpu
    chunk, fitting, threads = 4096, 48, 8
    settings.set_virtual_memory(ds.memory("gpu:1").in_use + fitting * chunk + chunk // 2)
    capacity = settings.virtual_memory()
    from devshim.backends.torch._virtual import memory as virtual_memory

    gpu = ds.gpu(1)  # here: ds.use_backend("torch") holds in this thread, not in the threads it starts

    def take(barrier, held):
        barrier.wait()
        while True:
            try:
                held.append(torch.empty(chunk, dtype=torch.uint8, device=gpu))
            except torch.OutOfMemoryError:
                return

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    virtual_memory.reset_peak(1)
    try:
        for _ in range(100):
            barrier, held = threading.Barrier(threads), []
            workers = [threading.Thread(target=take, args=(barrier, held)) for _ in range(threads)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            assert len(held) == fitting and virtual_memory.peak(1) <= capacity
            del held
            virtual_memory.reset_peak(1)
    finally:
        sys.setswitchinterval(switch)


def test_a_storage_resize_is_counted_and_refused_past_the_size(vgpu):
    """What FSDP does to free a parameter and take its memory again: t.untyped_storage().resize_(n)."""
    torch = vgpu
    t = torch.ones(MiB // 4, device=ds.gpu(0))  # 1 MiB
    storage = t.untyped_storage()
    assert storage.device == torch.device("vgpu", 0) and storage.nbytes() == MiB
    before = ds.memory("gpu:0").in_use
    storage.resize_(0)  # freed
    assert storage.nbytes() == 0 and ds.memory("gpu:0").in_use == before - MiB
    storage.resize_(MiB)  # taken again
    assert ds.memory("gpu:0").in_use == before
    settings.set_virtual_memory(before + MiB)
    with pytest.raises(torch.OutOfMemoryError, match=r"vgpu:0 out of memory\. Tried to allocate 2\.0 MiB"):
        storage.resize_(3 * MiB)  # 2 MiB more, 1 MiB free: refused before any memory is taken
    assert storage.nbytes() == MiB and ds.memory("gpu:0").in_use == before
    t.fill_(2.0)
    assert t.sum().item() == MiB // 2  # the tensor still works on its storage
    del t, storage


# ------------------------------------------------------------ the tools people run beside devshim
# accelerate's find_executable_batch_size and Lightning's batch-size finder (and the checks they
# make: accelerate's should_reduce_batch_size, Lightning's is_oom_error), on a torch virtual GPU
# of a given size, against the hand count of the bytes a batch takes (the model above, no_grad).
PER_EXAMPLE = 4 * (I_ + 2 * H_)


@pytest.fixture
def hand_counted(vgpu):
    """``size_for(largest)``: gpu:0 given the size where batches up to ``largest`` fit (a hand
    count: the model's weights, whatever else lives there, then PER_EXAMPLE bytes an example);
    returns the placed model."""
    torch = vgpu
    nn = torch.nn
    model = ds.place_model(nn.Sequential(nn.Linear(I_, H_, bias=False), nn.ReLU(),
                                         nn.Linear(H_, O_, bias=False)), ds.gpu(0))

    def size_for(largest: int):
        gc.collect()  # an earlier test's tensors held in a cycle go now, not while this one runs
        settings.set_virtual_memory(ds.memory("gpu:0").in_use + largest * PER_EXAMPLE + PER_EXAMPLE // 2)
        return model

    return size_for


@pytest.mark.parametrize("largest", [65, 60])
def test_accelerate_finds_the_largest_batch_a_hand_count_gives(vgpu, hand_counted, largest):
    """accelerate tries batches from 128 down (x 0.9 each time, in the pinned release) until one
    fits: the first it tries at or under the hand-counted largest batch, which is that batch
    when accelerate tries it (65); every batch it gave up was over the hand count."""
    memory_utils = pytest.importorskip("accelerate.utils.memory")
    torch = vgpu
    model = hand_counted(largest)
    tried = []

    @memory_utils.find_executable_batch_size(starting_batch_size=128)
    def run(batch_size):
        tried.append(batch_size)
        x = torch.randn(batch_size, I_).to(ds.gpu(0))
        with torch.no_grad():
            model(x)
        return batch_size

    found = run()
    assert found == tried[-1] <= largest < min(tried[:-1]) and len(tried) > 1
    if largest == 65:
        assert found == largest


def test_accelerate_takes_devshims_own_out_of_memory_error_for_one(vgpu, hand_counted):
    """The batch does not fit in ds.to_device itself: accelerate reads ds.DeviceOutOfMemoryError
    as an out-of-memory error and halves the batch, as it does torch's."""
    memory_utils = pytest.importorskip("accelerate.utils.memory")
    torch = vgpu
    hand_counted(64)
    settings.set_virtual_memory(ds.memory("gpu:0").in_use + 100 * 4 * I_)  # 100 input rows fit, no more

    tried = []

    @memory_utils.find_executable_batch_size(starting_batch_size=128)
    def run(batch_size):
        tried.append(batch_size)
        return ds.to_device(torch.randn(batch_size, I_), "gpu:0").shape[0]

    assert run() == tried[-1] <= 100 < min(tried[:-1])
    with pytest.raises(ds.DeviceOutOfMemoryError) as info:
        ds.to_device(torch.randn(128, I_), "gpu:0")
    assert memory_utils.should_reduce_batch_size(info.value)


def _lightning():
    pl = pytest.importorskip("pytorch_lightning")
    from pytorch_lightning.accelerators import Accelerator
    from pytorch_lightning.strategies import SingleDeviceStrategy

    class VirtualGpu(Accelerator):
        """Lightning's accelerator for devshim's virtual GPU gpu:0 (a user's own, as Lightning allows)."""

        def setup_device(self, device):
            pass

        def teardown(self):
            pass

        def get_device_stats(self, device):
            return {}

        @staticmethod
        def parse_devices(devices):
            return devices

        @staticmethod
        def get_parallel_devices(devices):
            return [ds.gpu(0)]

        @staticmethod
        def auto_device_count():
            return 1

        @staticmethod
        def is_available():
            return True

        @classmethod
        def name(cls):
            return "devshim-virtual-gpu"

    return pl, SingleDeviceStrategy(device=ds.gpu(0), accelerator=VirtualGpu())


@pytest.mark.skipif(bool(os.environ.get(settings.VIRTUAL_DEVICES_VAR)),
                    reason="the same in either pass (it makes its own virtual GPUs): the plain pass runs it (10 s)")
def test_lightnings_batch_size_finder_finds_the_largest_batch_a_hand_count_gives(vgpu, hand_counted, tmp_path):
    pl, strategy = _lightning()
    torch = vgpu
    from pytorch_lightning.tuner import Tuner

    largest = 300
    inner = hand_counted(largest)

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.batch_size, self.net, self.automatic_optimization = 256, inner, False

        def transfer_batch_to_device(self, batch, device, dataloader_idx):
            return batch  # copied in training_step: the batch Lightning keeps meanwhile stays on the host

        def training_step(self, batch, index):
            (x,) = batch
            with torch.no_grad():
                self.net(x.to(self.device))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            data = torch.utils.data.TensorDataset(torch.randn(1024, I_))
            return torch.utils.data.DataLoader(data, batch_size=self.batch_size)

    trainer = pl.Trainer(strategy=strategy, max_epochs=1, logger=False, enable_checkpointing=False,
                         default_root_dir=tmp_path,  # the finder's checkpoint of the model goes there
                         enable_progress_bar=False, enable_model_summary=False)
    found = Tuner(trainer).scale_batch_size(Module(), mode="binsearch", init_val=256, steps_per_trial=1, margin=0.0)
    assert found == largest


def test_lightning_and_accelerate_read_devshims_errors_as_out_of_memory(vgpu, hand_counted):
    pytest.importorskip("pytorch_lightning")
    memory_utils = pytest.importorskip("accelerate.utils.memory")
    from pytorch_lightning.utilities.memory import is_oom_error

    torch = vgpu
    hand_counted(4)
    errors = []
    for make in (lambda: torch.empty(MiB, device=ds.gpu(0)),                   # the virtual GPU's own
                 lambda: ds.to_device(torch.empty(MiB), "gpu:0"),              # ds.to_device's
                 lambda: ds.place_model(torch.nn.Linear(1024, 1024), "gpu:0")):  # ds.place_model's
        with pytest.raises(torch.OutOfMemoryError) as info:
            make()
        errors.append(info.value)
    assert isinstance(errors[1], ds.DeviceOutOfMemoryError) and isinstance(errors[2], ds.DeviceOutOfMemoryError)
    for error in errors:
        assert is_oom_error(error) and memory_utils.should_reduce_batch_size(error), error


def test_devshims_own_calls_name_the_out_of_memory_error(vgpu):
    torch = vgpu
    nn = torch.nn
    # gpu:0 keeps 8 MiB free, gpu:1 40 MiB or more: the 10 MiB copies fail on gpu:0 alone.
    settings.set_virtual_memory(max(ds.memory("gpu:0").in_use, ds.memory("gpu:1").in_use) + 40 * MiB)
    filler = torch.empty(ds.memory("gpu:0").free - 8 * MiB, dtype=torch.uint8, device=ds.gpu(0))
    big = torch.empty(10 * MiB, dtype=torch.uint8)
    calls = {
        "to_device": lambda: ds.to_device(big, "gpu:0"),
        "to_device nest": lambda: ds.to_device({"x": [big]}, "gpu:0"),
        "copy_if_needed": lambda: ds.copy_if_needed(big, "gpu:0"),
        "place_model": lambda: ds.place_model(nn.Linear(2048, 1280), "gpu:0"),
        "replicate": lambda: ds.replicate(nn.Linear(2048, 1280), ["gpu:1", "gpu:0"]),
        "split_batch": lambda: ds.split_batch(torch.empty(2, 10 * MiB, dtype=torch.uint8), ["gpu:1", "gpu:0"]),
        "convert": lambda: ds.convert(np.empty(10 * MiB, dtype=np.uint8), "torch", device="gpu:0"),
    }
    for what, call in calls.items():
        with pytest.raises(ds.DeviceOutOfMemoryError) as info:
            call()
        error = info.value
        assert isinstance(error.__cause__, torch.OutOfMemoryError), what
        assert isinstance(error, torch.OutOfMemoryError), what  # `except torch.OutOfMemoryError` catches it too
        assert error.device == "gpu:0" and error.free == 8 * MiB, (what, error)
        message = str(error)
        assert f"{error.call}: gpu:0 out of memory." in message and "8.0 MiB was free there before the call" in message
        assert "DEVSHIM_VIRTUAL_MEMORY is" in message, message
        advice = message.split("What to do: ")[1].split("(Worded as")[0]
        if what in ("place_model", "replicate"):  # a model: its advice is about the model, not a batch
            assert "smaller model" in advice and "device map" in advice and "batch" not in advice, message
            assert error.requested == 4 * (2048 * 1280 + 1280) and "the model's parameters and buffers" in message
        else:
            assert "smaller batch" in advice, message
        if what in ("to_device", "copy_if_needed", "convert", "to_device nest"):
            assert error.requested == 10 * MiB and "asked for 10.0 MiB" in message, message
    del filler


def test_the_free_bytes_are_those_before_the_call_not_beside_its_half_made_copy(vgpu):
    """A nest of two 6 MiB tensors for a GPU with 8 MiB free: the first is copied, the second
    does not fit. The error says 8 MiB was free (the first copy is gone with the failed call),
    and the nest asked for 12 MiB."""
    torch = vgpu
    settings.set_virtual_memory(ds.memory("gpu:0").in_use + 8 * MiB)
    nest = {"a": torch.empty(6 * MiB, dtype=torch.uint8), "b": torch.empty(6 * MiB, dtype=torch.uint8)}
    before = ds.memory("gpu:0").in_use
    with pytest.raises(ds.DeviceOutOfMemoryError) as info:
        ds.to_device(nest, "gpu:0")
    assert (info.value.free, info.value.requested) == (8 * MiB, 12 * MiB)
    assert "asked for 12.0 MiB (2 tensors); 8.0 MiB was free there before the call" in str(info.value)
    del info
    assert ds.memory("gpu:0").in_use == before  # and nothing of the failed call is kept


@pytest.mark.parametrize("form", ["replicate", "device map"])
def test_the_device_that_ran_out_is_named_among_several(vgpu, form):
    torch = vgpu
    nn = torch.nn
    settings.set_virtual_memory(max(ds.memory("gpu:0").in_use, ds.memory("gpu:1").in_use) + 40 * MiB)
    filler = torch.empty(ds.memory("gpu:1").free - 8 * MiB, dtype=torch.uint8, device=ds.gpu(1))  # gpu:1: 8 MiB free
    net = nn.Sequential(nn.Linear(2048, 1280), nn.Linear(1280, 2048))  # 10 MiB each
    with pytest.raises(ds.DeviceOutOfMemoryError) as info:
        if form == "replicate":
            ds.replicate(net, ["gpu:0", "gpu:1"])
        else:
            ds.place_model(net, {"0": "gpu:0", "1": "gpu:1"})
    assert info.value.device == "gpu:1" and info.value.free == 8 * MiB, info.value
    assert str(info.value).startswith(f"ds.{'replicate' if form == 'replicate' else 'place_model'}: gpu:1 out of memory.")
    assert {p.device.type for p in net.parameters()} == {"cpu"}
    del filler


@pytest.mark.parametrize("home", ["cpu", "gpu:1"])
def test_a_place_model_that_runs_out_leaves_every_parameter_where_it_was(vgpu, home):
    torch = vgpu
    nn = torch.nn
    net = ds.place_model(nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024)), home)
    net[0].weight.grad = torch.ones_like(net[0].weight)
    before = [(name, p, p.data_ptr(), p.device, p.grad) for name, p in net.named_parameters()]
    used = ds.memory("gpu:0").in_use
    settings.set_virtual_memory(used + 6 * MiB)  # the first layer (4 MiB) fits, the second does not
    with pytest.raises(ds.DeviceOutOfMemoryError) as info:
        ds.place_model(net, "gpu:0")
    after = [(name, p, p.data_ptr(), p.device, p.grad) for name, p in net.named_parameters()]
    assert [(n, id(p), ptr, d, id(g)) for n, p, ptr, d, g in after] == \
        [(n, id(p), ptr, d, id(g)) for n, p, ptr, d, g in before]
    assert ds.memory("gpu:0").in_use == used  # nothing of the failed move stays on gpu:0
    assert info.value.device == "gpu:0" and "smaller model" in str(info.value)


def test_a_bad_size_fails_what_needs_it_by_name(vgpu, setenv):
    torch = vgpu
    setenv(settings.VIRTUAL_MEMORY_VAR, "plenty")
    with pytest.raises(ds.VirtualMemorySizeError):
        ds.memory("gpu:0")
    with pytest.raises(ds.VirtualMemorySizeError):
        torch.ones(3, device=ds.gpu(0))
    setenv(settings.VIRTUAL_MEMORY_VAR, None)
    assert torch.ones(3, device=ds.gpu(0)).sum().item() == 3


@pytest.mark.same_in_every_pass  # a fresh interpreter that selects torch itself
def test_the_size_set_for_the_process_reaches_a_fresh_interpreter():
    pytest.importorskip("torch")
    from devshim.backends.probes import release

    if release("torch") < (2, 10):
        pytest.skip("torch's virtual GPUs need torch 2.10 or later (before it devshim refuses them by name, as the version sweep records)")
    code = (
        "import torch, devshim as ds\n"
        "ds.set_backend('torch')\n"
        "print(ds.memory('gpu:0').total)\n"
        "try:\n"
        "    torch.empty(2**21, device=ds.gpu(0))\n"
        "except torch.OutOfMemoryError:\n"
        "    print('refused')\n"
    )
    done = run_python(code, DEVSHIM_VIRTUAL_DEVICES="1", DEVSHIM_VIRTUAL_MEMORY="4MiB")
    assert done.stdout.split() == [str(4 * MiB), "refused"], done.stderr


def test_past_the_size_inside_a_backward_pass_the_pass_ends_in_torchs_error(vgpu):
    """Raised where the pass ends (an error inside one of torch's own backward nodes would end the
    process on an out-of-tree device), as loss.backward() raises it on a GPU that ran out."""
    torch = vgpu
    x = torch.ones(MiB, device=ds.gpu(0), requires_grad=True)  # 4 MiB
    loss = (x * 2).sum()
    settings.set_virtual_memory(ds.memory("gpu:0").in_use + 2 * MiB)  # x's 4 MiB gradient does not fit
    with pytest.raises(torch.OutOfMemoryError, match="vgpu:0"):
        loss.backward()
    settings.set_virtual_memory(0)
    x.grad = None  # what the refused pass computed is kept, as after an out-of-memory error on a GPU
    loss = (x * 2).sum()
    loss.backward()  # the same pass, with room: no error left over from the refused one
    assert x.grad is not None and float(x.grad[0]) == 2.0


# ------------------------------------------------------------ the pytest plugin's option


def test_the_plugin_option_gives_virtual_gpus_a_size_and_puts_it_back(pytester):
    before = settings.virtual_memory()
    pytester.makepyfile("""
        import os
        import devshim as ds

        def test_size():
            assert ds.settings.virtual_memory() == 64 * 2**20
            assert os.environ["DEVSHIM_VIRTUAL_MEMORY"] == str(64 * 2**20)
    """)
    with warnings.catch_warnings():  # a size without virtual devices warns, where none are asked for
        warnings.simplefilter("ignore", ds.VirtualMemoryWithoutDevicesWarning)
        result = pytester.runpytest_inprocess("--devshim-virtual-memory", "64MiB", "-p", "no:cacheprovider")
        result.assert_outcomes(passed=1)
        assert settings.virtual_memory() == before
        pytester.makeini("[pytest]\ndevshim_virtual_memory = 64MiB\n")
        pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_plugin_size_that_is_no_size_is_a_usage_error(pytester):
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest_inprocess("--devshim-virtual-memory", "lots", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--devshim-virtual-memory='lots' is not a size*"])


# ------------------------------------------------------------ planning without the memory

import memory_steps  # noqa: E402


@pytest.mark.parametrize("step, batch", [(memory_steps.torch_mlp, 512), (memory_steps.torch_cnn, 256)],
                         ids=["mlp-adam", "cnn-adam"])
def test_a_torch_estimate_agrees_with_the_peak_measured_on_a_virtual_gpu(vgpu, step, batch):
    """The same two steps of Adam, estimated on the CPU device under FakeTensorMode (no memory)
    and run on a virtual GPU, whose every storage devshim counts: within 5%. The virtual GPU takes
    Adam's default path on CUDA (foreach), which the estimate on "cpu" plans when told to."""
    found = ds.estimate_memory(step, batch, "cpu", capacity="1GiB", foreach=True)
    gc.collect()
    with ds.memory_peak("gpu:0") as peak:
        step(batch, ds.gpu(0))
    assert peak.method == "reset" and abs(peak.added - found.peak) <= 0.05 * found.peak, (peak.added, found)
    assert found.fits and found.device == "cpu" and found.kept <= found.peak and "FakeTensorMode" in found.method


def test_a_torch_estimate_answers_for_a_step_of_40_gb_without_allocating_it():
    """Ten layers of 16384 x 16384 with Adam: parameters, gradients and both moments are 4 x 10 x
    1 GiB (a hand count), more than this machine has; the estimate allocates none of it."""
    pytest.importorskip("torch")
    hand = 4 * 10 * (16384 * 16384 + 16384) * 4
    with ds.memory_peak("cpu", backend="numpy") as host:
        found = ds.estimate_memory(memory_steps.torch_wide, 1024, capacity="80GB", backend="torch")
    assert found.kept >= hand and found.peak >= max(hand, 40 * 10**9) and found.fits
    assert "of 74.5 GiB: fits" in str(found)
    assert host.added is None or host.added < 2**30, host  # the host did not hold the step


def test_a_torch_estimate_counts_the_tensors_it_is_given_and_refuses_what_it_cannot_know():
    torch = pytest.importorskip("torch")
    found = ds.estimate_memory(lambda t: t * 2, torch.ones(1000), backend="torch")
    assert (found.peak, found.kept) == (8000, 8000)  # the argument, then the result beside it
    with pytest.raises(ds.MemoryEstimateError, match=r"read a tensor's value") as info:
        ds.estimate_memory(lambda: torch.ones(3).sum().item(), backend="torch")
    assert isinstance(info.value, RuntimeError) and str(info.value).endswith("give data-dependent shapes their "
                                                                             "largest size.")  # no reader's advice
    weights = torch.ones(3)
    with pytest.raises(ds.MemoryEstimateError, match="made outside the estimate"):
        ds.estimate_memory(lambda: weights * 2, backend="torch")


def test_a_torch_estimates_refusal_names_the_steps_line():
    """A value read, or an outside tensor used, is named by the step's line: the innermost frame
    of the error outside torch, devshim, the standard library and installed packages (none where
    the step is torch's own function)."""
    torch = pytest.importorskip("torch")
    with pytest.raises(ds.MemoryEstimateError, match=r"read a tensor's value in <lambda>\(\) at .*test_memory.py:"):
        ds.estimate_memory(lambda: torch.ones(3).sum().item(), backend="torch")
    with pytest.raises(ds.MemoryEstimateError, match=r"^the step read a tensor's value \(aten"):
        ds.estimate_memory(torch.Tensor.item, torch.ones(1), backend="torch")  # no line of the step's own
    weights = torch.ones(3)
    with pytest.raises(ds.MemoryEstimateError, match=r"made outside the estimate in <lambda>\(\) at .*test_memory.py:"):
        ds.estimate_memory(lambda: weights * 2, backend="torch")
    with pytest.raises(ds.MemoryEstimateError, match=r"value in step_with_torchs_readers\(\) at .*test_memory.py:.*GradScaler"):
        ds.estimate_memory(step_with_torchs_readers, 64, backend="torch")
    with pytest.raises(ds.MemoryEstimateError, match=r"value in step_averaging_with_statistics\(\) at .*test_memory.py:"):
        ds.estimate_memory(step_averaging_with_statistics, backend="torch")  # read in the standard library


def test_a_torch_estimates_refusal_names_the_steps_line_past_every_installed_folder(tmp_path, monkeypatch):
    """A value read in code from any folder Python installs into (its standard library, platform
    library, pure and platform site-packages, `site`'s folders, and the user's site-packages
    where user site is on) is named at the step's own line that called it; code from any other
    folder is the step's own. The folders are made distinct here: in a virtual environment
    several of them are one folder, which would hide a folder left out."""
    import site
    import sysconfig

    torch = pytest.importorskip("torch")
    folders = {name: str(tmp_path / name) for name in ("stdlib", "platstdlib", "purelib", "platlib", "site", "user")}
    folders["scripts"] = str(tmp_path / "site-scripts")  # not code Python imports; its name begins with "site"'s
    monkeypatch.setattr(sysconfig, "get_paths", lambda *args, **kwargs: {
        key: folders[key] for key in ("stdlib", "platstdlib", "purelib", "platlib", "scripts")})
    installed = site.getsitepackages()  # still skipped: a test runner's code may sit between step and torch
    monkeypatch.setattr(site, "getsitepackages", lambda *args: [folders["site"], *installed])
    monkeypatch.setattr(site, "getusersitepackages", lambda: folders["user"])

    def reader_in(folder):  # a function whose code says it lives in `folder`, reading a value
        space = {}
        exec(compile("def read(t):\n    return float(t.sum())\n", os.path.join(folder, "reader.py"), "exec"), space)
        return space["read"]

    for user_site in (True, False):
        monkeypatch.setattr(site, "ENABLE_USER_SITE", user_site)
        for name, folder in folders.items():
            read = reader_in(folder)

            def step(read=read):
                return read(torch.ones(3))

            own = name == "scripts" or (name == "user" and not user_site)
            where = rf"read\(\) at {re.escape(folder)}" if own else r"step\(\) at .*test_memory.py"
            with pytest.raises(ds.MemoryEstimateError, match=rf"value in {where}"):
                ds.estimate_memory(step, backend="torch")


def step_averaging_with_statistics():
    """A step that hands tensors to Python's standard library, which reads their values."""
    import statistics

    import torch

    losses = torch.rand(4)
    return statistics.fmean([losses[0], losses[1]])


def step_with_torchs_readers(batch, scaled=True, loaded=False):
    """A step of Adam with a GradScaler (`scaled`) and its batch drawn through a DataLoader
    (`loaded`): torch's own code reads values in both."""
    import torch

    net = torch.nn.Linear(512, 512)
    optimizer = torch.optim.Adam(net.parameters())
    scaler = torch.amp.GradScaler("cpu", enabled=scaled)
    x = torch.rand(batch, 512)
    if loaded:
        (x,) = next(iter(torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=batch)))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = net(x).float().square().mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()


def test_a_torch_estimate_of_a_step_with_torchs_own_value_readers_says_what_to_do_instead():
    """torch.amp.GradScaler's step reads whether the gradients are finite, a DataLoader's sampler
    its order: values the estimate has not got. The error says what to do instead, which then
    works."""
    pytest.importorskip("torch")
    step = step_with_torchs_readers
    with pytest.raises(ds.MemoryEstimateError, match=r"read a tensor's value.*GradScaler reads whether the gradients "
                                                     r"are finite.*optimizer.step\(\) for scaler.step"):
        ds.estimate_memory(step, 64, backend="torch")
    with pytest.raises(ds.MemoryEstimateError, match=r"read a tensor's value.*A DataLoader draws its order") as info:
        ds.estimate_memory(step, 64, False, True, backend="torch")
    assert "GradScaler" not in str(info.value)
    assert ds.estimate_memory(step, 64, False, backend="torch").peak > 4 * 512 * 512 * 4  # weights, grads, moments


def adam_step_alone(device, foreach=None, layers=4, width=512):
    """Adam's step on `layers` square layers without bias, their gradients set by hand: the
    optimiser's step alone, with no backward pass (which only a CUDA device runs for CUDA tensors)."""
    import torch

    net = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)]).to(device)
    optimizer = torch.optim.Adam(net.parameters(), foreach=foreach)
    for parameter in net.parameters():
        parameter.grad = torch.ones_like(parameter)
    optimizer.step()
    return net, optimizer


def test_a_torch_estimate_takes_the_optimisers_path_real_tensors_take_on_its_device():
    """torch picks its `foreach` kernels by a tensor's type, and a FakeTensor's is none it lists:
    the estimate lets fake tensors take their device's real path. Adam's default on the CPU is the
    per-tensor path (a few layers' temporaries at once), on CUDA foreach (a temporary as large as
    every parameter at once: planned as the per-tensor path, a step of 40 GB on CUDA was 8 GiB
    under its peak). CUDA's side needs a torch built with CUDA, and a GPU where torch initialises
    a layer's CUDA weights on it even when they are fake (torch 2.4)."""
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.optim import optimizer

    parameters = 4 * 512 * 512 * 4

    def above_kept(device, foreach=None):
        found = ds.estimate_memory(adam_step_alone, device, foreach, backend="torch")
        assert found.kept >= 4 * parameters  # the parameters, their gradients and Adam's two moments
        return found.peak - found.kept

    per_tensor, every_tensor = above_kept("cpu"), above_kept("cpu", True)
    assert per_tensor < parameters and every_tensor == parameters
    if torch.backends.cuda.is_built():
        try:
            assert (above_kept("cuda"), above_kept("cuda", False)) == (every_tensor, per_tensor)
        except ds.MemoryEstimateError:  # no CUDA device: torch 2.4 builds no CUDA layer then, fake or not
            assert not torch.cuda.device_count()

    from torch.utils._foreach_utils import _has_foreach_support  # clip_grad_norm_'s choice, CPU included

    taken: list = []

    def clip_grad_norm_path():
        taken.append(_has_foreach_support([torch.ones(3)], torch.device("cpu")))

    ds.estimate_memory(clip_grad_norm_path, backend="torch")
    clip_grad_norm_path()
    assert taken[0] == taken[1]  # fake as real
    assert FakeTensor not in optimizer._foreach_supported_types  # as they were before the estimate


def test_a_virtual_gpu_takes_the_optimisers_path_cuda_takes(vgpu):
    """Optimisers and clip_grad_norm_ take torch's foreach kernels on a virtual GPU by default, as on
    CUDA (torch picks the path by a tensor's type, and virtual tensors are listed with its own): a
    virtual GPU measures CUDA's peak, one parameter-sized temporary above the per-tensor path's, and
    an estimate on "cpu" with foreach=True plans the same difference."""
    torch = vgpu
    from torch.utils._foreach_utils import _has_foreach_support

    def measured(foreach):
        gc.collect()
        with ds.memory_peak("gpu:0") as peak:
            result = adam_step_alone(ds.gpu(0), foreach)
        del result
        return peak.added

    default, every_tensor, per_tensor = measured(None), measured(True), measured(False)
    planned = {foreach: ds.estimate_memory(adam_step_alone, "cpu", foreach).peak for foreach in (True, False)}
    assert default == every_tensor > per_tensor
    assert every_tensor - per_tensor == planned[True] - planned[False]
    assert _has_foreach_support([torch.ones(3, device=ds.gpu(0))], ds.gpu(0))


def test_torchs_foreach_lists_take_a_type_once_and_an_estimate_leaves_them_as_they_were():
    """`take_foreach_path` adds a type to torch's two foreach lists once and says where; the
    estimate lists FakeTensor for the step's time only, so real tensors' paths are not changed."""
    torch = pytest.importorskip("torch")
    from devshim.backends.torch import _internals

    lists = [found for found in (_internals.FOREACH_TYPES.get(), _internals.CLIP_FOREACH_TYPES.get()) if found is not None]

    class Listed(torch.Tensor):
        pass

    try:
        added = _internals.take_foreach_path(Listed)
        assert [id(found) for found in added] == [id(found) for found in lists] and all(Listed in f for f in lists)
        assert _internals.take_foreach_path(Listed) == []
    finally:
        for found in lists:
            found.remove(Listed)
    planned = ds.estimate_memory(memory_steps.torch_mlp, 64, "cpu", backend="torch")
    fake_type = _internals.FAKE_TENSORS.get().tensor  # torch itself adds DTensor when it is imported
    assert planned.peak > 0 and lists and not any(fake_type in found or Listed in found for found in lists)


def test_a_torch_estimate_of_a_virtual_gpu_step_says_how_to_plan_it(vgpu):
    """torch's fake tensors cannot stand in for a virtual GPU's: a step that makes one, or is given
    a tensor or a model on one, is refused by name, before torch fails in its own words."""
    torch = vgpu
    gpu = ds.gpu(0)
    steps = [(memory_steps.torch_mlp, (64, gpu)), (lambda t: t * 2, (ds.to_device(torch.ones(3), gpu),)),
             (lambda net: net(torch.ones(2, 4)), (torch.nn.Linear(4, 4).to(gpu),))]
    for step, args in steps:
        with pytest.raises(ds.MemoryEstimateError, match=r'virtual GPU vgpu:0.*build the step on "cpu"'):
            ds.estimate_memory(step, *args)
    assert ds.estimate_memory(memory_steps.torch_mlp, 64, "cpu").device == "cpu"


def test_a_torch_estimate_of_a_cuda_step_without_a_cuda_device_says_how_to_plan_it():
    """With no CUDA device, a CUDA step's backward pass fails in torch's autograd engine (a torch
    built with CUDA), or its first CUDA tensor does (a torch without): a named error says to
    build the step on "cpu". Where torch has a CUDA device, the estimate is made on it."""
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count():
        assert ds.estimate_memory(memory_steps.torch_mlp, 64, "cuda", backend="torch").device == "cuda:0"
        return
    with pytest.raises(ds.MemoryEstimateError, match=r'no CUDA device here.*build it on "cpu".*torch said: ') as info:
        ds.estimate_memory(memory_steps.torch_mlp, 64, "cuda", backend="torch")
    assert isinstance(info.value, RuntimeError) and isinstance(info.value.__cause__, RuntimeError)
    with pytest.raises(RuntimeError) as info:  # a CPU step's own error stays its own
        ds.estimate_memory(lambda: torch.ones(2, 3) @ torch.ones(2, 3), backend="torch")
    assert not isinstance(info.value, ds.DevshimError)


def test_the_largest_batch_is_found_by_bisection_with_progress_on_stderr(capsys):
    pytest.importorskip("torch")
    per_example, kept = 4 * (784 + 1024 + 1024 + 10), None

    def step(batch):
        return memory_steps.torch_mlp(batch, "cpu", steps=1)

    found = ds.largest_batch(step, 64 * MiB, backend="torch")
    assert found.estimate is not None and found.estimate.peak <= 64 * MiB and found.capacity == 64 * MiB
    above = ds.estimate_memory(step, found.batch + 1, capacity=64 * MiB, backend="torch")
    assert not above.fits  # the next batch does not fit: the largest
    batches = [batch for batch, _ in found.tried]
    doubling = batches[:batches.index(max(batches)) + 1]
    assert doubling == [2**i for i in range(len(doubling))] and len(batches) <= 2 * len(doubling) + 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == len(batches) and lines[0].startswith("ds.largest_batch: batch 1: peak ")
    assert "does not fit" in "\n".join(lines) and all(line.endswith(" s)") for line in lines)
    nothing = ds.largest_batch(step, 1024, backend="torch", progress=False)
    assert (nothing.batch, nothing.estimate) == (0, None) and capsys.readouterr().err == ""
    del per_example, kept


def test_the_largest_batch_is_exactly_the_largest_that_fits_for_every_capacity():
    """A step of exactly 1000 bytes an example: for every capacity the search ends on the largest
    batch that fits (however the bisection's halves fall), builds each batch's inputs with
    `inputs`, estimates with the backend asked for, says which argument was not a size, and shows
    each estimate's own seconds as it is made (flushed: a notebook's stream shows nothing before)."""
    torch = pytest.importorskip("torch")

    def step(examples):
        return torch.empty(examples * 1000, dtype=torch.uint8)

    for fitting in range(1, 41):
        for spare in (0, 999):
            found = ds.largest_batch(step, fitting * 1000 + spare, backend="torch", progress=False)
            assert (found.batch, found.estimate.peak) == (fitting, fitting * 1000)
    doubled = ds.largest_batch(step, 9000, inputs=lambda batch: (2 * batch,), backend="torch", progress=False)
    assert doubled.batch == 4  # 2 * 4 examples fit in 9000 bytes, 2 * 5 do not

    class Notebook(io.StringIO):  # a stream that shows what it holds only when flushed, as a notebook's
        shown = ""

        def flush(self):
            self.shown = self.getvalue()

    began = time.perf_counter()
    with contextlib.redirect_stderr(Notebook()) as stderr:
        found = ds.largest_batch(step, 5000, backend="torch")
    took = [float(line.rsplit("(", 1)[1].split(" s)")[0]) for line in stderr.shown.splitlines()]
    assert len(took) == len(found.tried) and all(0 <= seconds <= time.perf_counter() - began + 0.1
                                                  for seconds in took)
    with pytest.raises(ValueError, match=r"^capacity='lots' is not a size"):
        ds.largest_batch(step, "lots", backend="torch")
    with pytest.raises(ds.MemoryEstimateUnsupportedError, match="cannot estimate a NumPy step"):
        ds.largest_batch(step, 5000, backend="numpy")  # the backend asked for is the one estimating


JAX_MEASURE = '''
import gc, json, sys
sys.path.insert(0, {tests!r})
import jax
import devshim as ds
import memory_steps

ds.set_backend("jax")
device = ds.gpu(0)                            # a virtual GPU: its memory is the process's own
found = {{}}
for name, batch in (("mlp", 4096), ("cnn", 512)):
    step, state, x, y = memory_steps.jax_training(name, batch, device)
    estimate = ds.estimate_memory(step, state, x, y)
    compiled = jax.jit(step)
    jax.block_until_ready(compiled(state, x, y))  # compiled, and run once
    runs = []
    for _ in range(3):
        gc.collect()
        with ds.memory_peak("cpu") as peak:        # the arguments are resident already
            out = compiled(state, x, y)
            jax.block_until_ready(out)
        del out
        runs.append((peak.method, peak.added))
    found[name] = [runs, estimate.peak - estimate.details["arguments"], estimate.device,
                   estimate.details.get("library_operations")]
print(json.dumps(found))
'''


@pytest.mark.same_in_every_pass  # a fresh interpreter with DEVSHIM_BACKEND=jax
def test_a_jax_estimate_agrees_with_the_peak_measured_on_a_virtual_gpu():
    """JAX's virtual GPUs are host devices: what a compiled step takes is the process's resident
    peak while it runs (glibc told to map every block of 4 KiB or more, so freed memory leaves and
    a reuse shows; the largest of three runs, since XLA may free the run before's buffers only
    after the next run began). The MLP and the small CNN with Adam agree within 5% on every
    release: virtual GPUs keep each operation in XLA's own code, as a GPU does (XLA's CPU compiler
    would hand the CNN's convolutions to oneDNN or YNNPACK, whose scratch is outside its count,
    1.19 x the estimate on JAX 0.10.2), so the estimate names no library operation there."""
    pytest.importorskip("jax")
    import json
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("the process's resident peak is reset through /proc (Linux)")
    tests = os.path.dirname(os.path.abspath(__file__))
    done = run_python(JAX_MEASURE.format(tests=tests), DEVSHIM_BACKEND="jax", DEVSHIM_VIRTUAL_DEVICES="1",
                      MALLOC_MMAP_THRESHOLD_="4096")
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    for name, (runs, estimated, device, libraries) in found.items():
        assert {method for method, _ in runs} == {"reset"} and device == "gpu:0", found
        measured = max(added for _, added in runs)
        assert 0.95 * estimated <= measured <= 1.05 * estimated, (name, runs, estimated)
        assert libraries is None, (name, libraries)


def test_a_jax_step_jitted_already_is_estimated_with_its_own_donated_and_static_arguments():
    """A step its author jitted is lowered as it is: with donate_argnums its outputs reuse the
    state's buffers, and the estimate is XLA's analysis of that program, below the same step
    undonated; its static arguments are its own, and a branch on an argument it did not make
    static is refused saying where to name it."""
    jax = pytest.importorskip("jax")
    step, state, x, y = memory_steps.jax_training("mlp", 4096, jax.devices("cpu")[0])
    plain = ds.estimate_memory(step, state, x, y, backend="jax")
    donating = jax.jit(step, donate_argnums=0)
    found = ds.estimate_memory(donating, state, x, y, backend="jax")
    analysis = donating.lower(state, x, y).compile().memory_analysis()
    assert found.details["aliased"] == analysis.alias_size_in_bytes > 0 == plain.details["aliased"]
    assert found.peak < plain.peak and found.details["arguments"] == plain.details["arguments"]
    ones = jax.jit(lambda x, n: jax.numpy.ones(n, jax.numpy.float32) * x, static_argnames="n")
    scalar = jax.ShapeDtypeStruct((), jax.numpy.float32)  # (float32 where the JAX harness turned x64 on)
    assert ds.estimate_memory(ones, scalar, n=1000, backend="jax").details["outputs"] == 4000
    with pytest.raises(ds.MemoryEstimateError, match=r"jitted yourself: name it in jax.jit's static_argnums"):
        ds.estimate_memory(jax.jit(lambda x, n: x * 2 if n > 0 else x), scalar, 1000, backend="jax")


def test_an_estimate_for_several_devices_prints_them_all_and_one_for_one_device():
    """A sharded step's figures are each device's (JAX names them in `details["devices"]`): the
    estimate prints them all; an estimate without that list prints its one device."""
    found = ds.MemoryEstimate(2**20, 0, "gpu:0", "how", 2**30, {"devices": ["gpu:0", "gpu:1"]})
    assert str(found) == "peak 1.0 MiB on each of gpu:0, gpu:1 of 1.0 GiB: fits (kept after: 0 B)"
    for details in ({"arguments": 0}, None):
        assert str(found._replace(details=details)) == "peak 1.0 MiB on gpu:0 of 1.0 GiB: fits (kept after: 0 B)"


def test_an_estimate_prints_what_it_does_not_count():
    """Where part of what a step takes is outside the framework's figures (`details["not_counted"]`,
    in words), the printed estimate says so."""
    found = ds.MemoryEstimate(2**20, 0, "cpu:0", "how", None, {"not_counted": "a library's scratch"})
    assert str(found) == "peak 1.0 MiB on cpu:0 (kept after: 0 B; not counted: a library's scratch)"


def test_a_jax_estimate_on_the_cpu_names_the_operations_run_in_kernel_libraries():
    """XLA's CPU program hands some operations to kernel libraries (LAPACK for an inverse; oneDNN,
    YNNPACK on some releases) whose own scratch its memory analysis does not count: the estimate
    names them, and an elementwise step, which has none, names nothing."""
    jax = pytest.importorskip("jax")
    from jax.sharding import SingleDeviceSharding

    matrix = jax.ShapeDtypeStruct((64, 64), jax.numpy.float32, sharding=SingleDeviceSharding(jax.devices("cpu")[0]))
    inverse = ds.estimate_memory(jax.numpy.linalg.inv, matrix, backend="jax")
    operations = inverse.details["library_operations"]
    assert any("getrf" in name for name in operations), operations  # LAPACK's LU factorisation
    total = sum(operations.values())
    assert f"not counted: whatever scratch memory the {total} operations XLA's CPU runtime" in str(inverse)
    plain = ds.estimate_memory(lambda m: m * 2 + 1, matrix, backend="jax")
    assert "library_operations" not in plain.details and "not counted" not in str(plain)


JAX_SHARDED = """
import jax, jax.numpy as jnp, numpy as np
import devshim as ds
from jax.sharding import Mesh, NamedSharding, PartitionSpec

mesh = Mesh(np.array(ds.try_all_gpus()), ("data",))   # two virtual GPUs
def step(w, x):
    return w - 0.1 * jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w)
w = jax.ShapeDtypeStruct((1024, 1024), jnp.float32, sharding=NamedSharding(mesh, PartitionSpec()))
x = jax.ShapeDtypeStruct((8192, 1024), jnp.float32, sharding=NamedSharding(mesh, PartitionSpec("data")))
found = ds.estimate_memory(step, w, x)
print(found.device, found.details["devices"], found.details["arguments"], found.details["outputs"])
print(found)
"""


@pytest.mark.same_in_every_pass  # a fresh interpreter with DEVSHIM_BACKEND=jax and two virtual GPUs
def test_a_jax_estimate_of_a_sharded_step_gives_each_devices_figures_and_names_them_all():
    """A step sharded over two devices runs one program on each: its figures are each device's
    (the weights whole, half the batch: by hand), and the estimate names both, the first as its
    device."""
    pytest.importorskip("jax")
    done = run_python(JAX_SHARDED, DEVSHIM_BACKEND="jax", DEVSHIM_VIRTUAL_DEVICES="2")
    assert done.returncode == 0, done.stderr[-3000:]
    figures, printed = done.stdout.splitlines()[-2:]
    weights, half_batch = 1024 * 1024 * 4, 4096 * 1024 * 4
    assert figures == f"gpu:0 ['gpu:0', 'gpu:1'] {weights + half_batch} {weights}"
    assert printed.startswith("peak ") and " on each of gpu:0, gpu:1 (kept after: " in printed


def test_a_torch_estimate_takes_a_model_as_an_argument_and_leaves_it_as_it_was():
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    weights = 4 * (256 * 128 + 128 + 128 * 10 + 10)
    before = [(p, p.data_ptr()) for p in net.parameters()]

    def step(model, x):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(x).sum().backward()
        optimizer.step()

    found = ds.estimate_memory(step, net, torch.ones(64, 256), backend="torch")
    assert found.details["arguments"] == weights + 64 * 256 * 4
    assert found.kept >= found.details["arguments"] + weights  # the gradients stay
    assert [(p, p.data_ptr()) for p in net.parameters()] == before and all(p.grad is None for p in net.parameters())


def test_a_torch_estimate_runs_compiled_code_eagerly_and_allocates_none_of_it():
    """Code compiled with torch.compile runs Inductor's kernels, whose tensors are real memory made
    below torch's dispatcher: the estimate runs it eagerly instead, so a step with a compiled model
    (built in the step, or passed in) or a compiled function is estimated as the same step
    uncompiled, without compiling or allocating it (a layer of 1 GiB, Adam, a batch of 1 GiB), and
    torch.compile compiles again afterwards."""
    torch = pytest.importorskip("torch")
    graphs = []

    def keep_graph(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    def layer(width):
        return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU())

    def step(net, batch, width, wrap=lambda fn: fn):
        optimizer = torch.optim.Adam(net.parameters())
        wrap(lambda x: net(x).square().mean())(torch.rand(batch, width)).backward()
        optimizer.step()

    def built_in_step(batch, width, wrap=lambda net: net):
        step(wrap(layer(width)), batch, width)

    small = layer(64)
    uncompiled = ds.estimate_memory(step, small, 32, 64, backend="torch")
    assert uncompiled.peak > 0
    with ds.memory_peak("cpu", backend="numpy") as host:
        found = [ds.estimate_memory(built_in_step, 16384, 16384, torch.compile, backend="torch"),
                 ds.estimate_memory(step, small, 32, 64, torch.compile, backend="torch"),
                 ds.estimate_memory(step, torch.compile(small), 32, 64, backend="torch")]
    assert found[0].peak == ds.estimate_memory(built_in_step, 16384, 16384, backend="torch").peak > 2**32
    assert [estimate.peak for estimate in found[1:]] == [uncompiled.peak] * 2
    assert host.added is None or host.added < 2**30, host  # the host did not hold the step
    compiled = torch.compile(lambda x: x.square() + 1, backend=keep_graph)
    assert compiled(torch.ones(3)).tolist() == [2.0] * 3 and len(graphs) == 1  # compiled, after the estimate


def test_numpy_claims_its_own_memory_errors_and_leaves_other_frameworks_theirs():
    """NumPy's contract is asked for every MemoryError; another framework's subclass (CuPy's
    OutOfMemoryError is one) is that framework's to claim."""
    numpy_memory = ds.backends.memory("numpy")

    class OtherFrameworksOutOfMemory(MemoryError):
        pass

    assert numpy_memory.is_out_of_memory(MemoryError("no room"))
    try:
        np.empty(2**62, dtype=np.uint8)
    except MemoryError as error:  # numpy's own _ArrayMemoryError
        assert numpy_memory.is_out_of_memory(error)
    assert not numpy_memory.is_out_of_memory(OtherFrameworksOutOfMemory("not NumPy's"))
    assert not numpy_memory.is_out_of_memory(ds.DeviceOutOfMemoryError("already named"))

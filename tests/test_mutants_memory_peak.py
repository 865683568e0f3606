"""`ds.memory_peak`, `ds.estimate_memory` and `ds.largest_batch` (devshim/device_memory.py): what
they promise that the mutation env (`tox -e mutation`, tools/mutation.py) found no test holding them
to. Most tests run on stand-in frameworks registered here: a CPU and two GPUs whose memory figures
(the bytes in use, a peak counter that can or cannot be reset, an estimate) the test sets, so that
each figure a block or a search gives is known to the byte on any machine."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

import devshim as ds
from devshim import backends, device_memory
from devshim._device import Device
from devshim.backends import registry
from devshim.backends.memory_base import MemoryInfo
from helpers import InlineThread as _Inline, TwoGpuDevices

SAMPLER = "devshim memory_peak"


class _Meter:
    """A stand-in memory contract: for each device (its native tuple) the bytes in use and a peak
    counter, both set by the test. `resettable` says whether `reset_peak` can start the counter
    over (else it is a counter that only rises, or none at all with `counting=False`). `asked`
    counts the calls for the counter (`figures`). `estimate` answers for a step that returns its
    own peak in bytes, and records each batch (its first argument) it was asked for."""

    def __init__(self, resettable: bool = True, counting: bool = True) -> None:
        self.resettable, self.counting = resettable, counting
        self.used: dict = {}
        self.counter: dict = {}
        self.asked = 0
        self.estimated: list = []

    def use(self, native, size) -> None:
        """`size` bytes in use on `native` now: its counter rises with them."""
        self.used[native] = size
        if size is not None:
            self.counter[native] = max(self.counter.get(native, 0), size)

    def clear_counter(self, native) -> None:
        """The counter started over by someone else (the user's own reset call)."""
        self.counter[native] = self.used.get(native, 0)

    def figures(self, adapter, native) -> MemoryInfo:
        self.asked += 1
        peak = self.counter.get(native) if self.counting else None
        return MemoryInfo(adapter.describe(native), in_use=self.used.get(native), peak=peak)

    def in_use(self, adapter, native):
        return self.used.get(native)

    def reset_peak(self, adapter, native) -> bool:
        if not self.resettable:
            return False
        self.clear_counter(native)
        return True

    def estimate(self, adapter, step, args, kwargs) -> dict:
        assert args[0] not in self.estimated, f"batch {args[0]} estimated twice"
        self.estimated.append(args[0])
        peak = step(*args, **kwargs)
        return {"peak": peak, "kept": 0, "device": "stand-in:0", "method": "the step's own word", "details": None}


def _framework_class(name: str) -> type:
    class Framework(TwoGpuDevices, backends.Backend):
        """A stand-in framework with a CPU and two GPUs, whose devices are ("cpu", 0), ("gpu", 1) ..."""

        spec = backends.BackendSpec(name, import_name=__name__, title=f"The stand-in framework {name}")

    return Framework


@pytest.fixture
def standin(monkeypatch, setenv):
    """``standin(meter, name="standin_a")``: a stand-in framework registered under `name` whose
    memory contract is `meter`; gives its name."""
    setenv("DEVSHIM_VIRTUAL_DEVICES", None)
    added: list = []

    def register(meter: _Meter, name: str = "standin_a") -> str:
        cls = _framework_class(name)
        backends.register_backend(cls.spec, cls)
        added.append(name)
        monkeypatch.setitem(registry._contracts, (name, "memory"), meter)
        return name

    yield register
    for name in added:
        backends.unregister_backend(name)


CPU, GPU0, GPU1 = ("cpu", 0), ("gpu", 0), ("gpu", 1)


def _samplers() -> list:
    return [thread for thread in threading.enumerate() if thread.name == SAMPLER]


# ------------------------------------------------------------------ which device, which framework


def test_a_block_opened_on_another_frameworks_device_measures_it_on_that_framework(standin):
    """A device object names its framework, whatever backend is selected."""
    meter = _Meter()
    name = standin(meter)
    meter.use(GPU1, 700)
    device = Device("gpu", 1, backend=name)
    with ds.memory_peak(device) as peak:
        pass
    assert peak.device == device and peak.device.backend == name
    assert (peak.method, peak.start, peak.peak) == ("reset", 700, 700)


def test_memory_of_another_frameworks_device_asks_that_framework(standin):
    meter = _Meter()
    name = standin(meter)
    meter.use(GPU1, 1234)
    info = ds.memory(Device("gpu", 1, backend=name))
    assert info.in_use == 1234 and info.device.backend == name


def test_a_block_without_a_device_measures_the_frameworks_first_gpu(standin):
    name = standin(_Meter())
    peak = ds.memory_peak(backend=name)
    assert peak.device == Device("gpu", 0, backend=name)


def test_a_block_not_yet_opened_has_no_figures():
    """Before the `with` block starts: every figure None, no method, no readings, no reason."""
    peak = ds.memory_peak("cpu")
    assert (peak.start, peak.end, peak.peak, peak.added) == (None, None, None, None)
    assert (peak.method, peak.resolution, peak.readings, peak.missed, peak.reason) == ("", 0.0, 0, 0, "")
    assert repr(peak) == f"MemoryPeak(device={peak.device!r}, peak=None, start=None, end=None, method='')"


# ------------------------------------------------------------------ a counter that is reset


def test_a_reset_peak_keeps_what_a_nested_block_saw_when_the_counter_was_reset_after_it(standin):
    """The inner block's counter read 900; then the user started the counter over (torch's own
    reset_peak_memory_stats, say) before the outer block ended: the outer peak keeps 900."""
    meter = _Meter()
    name = standin(meter)
    meter.use(GPU0, 100)
    with ds.memory_peak("gpu:0", backend=name) as outer:
        with ds.memory_peak("gpu:0", backend=name) as inner:
            meter.use(GPU0, 900)
            meter.use(GPU0, 100)
        meter.clear_counter(GPU0)
    assert (inner.method, inner.peak) == ("reset", 900)
    assert (outer.method, outer.peak, outer.added) == ("reset", 900, 800)


def test_a_reset_peak_keeps_what_its_counter_held_before_a_later_nested_block_reset_it(standin):
    """A first nested block opens and closes; then 900 bytes come and go; then a second nested
    block resets the counter: the outer block still sees the 900."""
    meter = _Meter()
    name = standin(meter)
    meter.use(GPU0, 100)
    with ds.memory_peak("gpu:0", backend=name) as outer:
        with ds.memory_peak("gpu:0", backend=name):
            pass
        meter.use(GPU0, 900)
        meter.use(GPU0, 100)
        with ds.memory_peak("gpu:0", backend=name) as second:
            pass
    assert second.peak == 100
    assert outer.peak == 900


def test_a_reset_peak_is_never_below_the_blocks_first_reading(standin):
    """500 bytes in use when the block opens, 400 freed, and the counter started over by the user:
    the peak is still the 500 the block began with."""
    meter = _Meter()
    name = standin(meter)
    meter.use(GPU0, 500)
    with ds.memory_peak("gpu:0", backend=name) as peak:
        meter.use(GPU0, 100)
        meter.clear_counter(GPU0)
    assert (peak.method, peak.start, peak.end, peak.peak, peak.added) == ("reset", 500, 100, 500, 0)


def test_a_reset_peak_is_never_below_the_blocks_last_reading(standin):
    """A counter that lags the bytes in use (it reads 100 while 700 are in use)."""
    meter = _Meter()
    name = standin(meter)
    meter.use(GPU0, 100)
    with ds.memory_peak("gpu:0", backend=name) as peak:
        meter.used[GPU0] = 700  # in use, the counter not yet told
    assert (peak.method, peak.start, peak.end, peak.peak, peak.added) == ("reset", 100, 700, 700, 600)


def test_blocks_on_two_gpus_keep_each_gpus_figures_apart(standin):
    """A block on gpu:1 nested in one on gpu:0: gpu:1's bytes are not gpu:0's peak."""
    meter = _Meter()
    name = standin(meter)
    meter.use(GPU0, 100)
    meter.use(GPU1, 5000)
    with ds.memory_peak("gpu:0", backend=name) as outer:
        with ds.memory_peak("gpu:1", backend=name) as inner:
            meter.use(GPU1, 9000)
    assert (inner.peak, outer.peak) == (9000, 100)


def test_the_hosts_peak_is_the_processs_whichever_framework_measures_it(standin):
    """The host's peak counter is one for the process: a block on one framework's CPU that another
    framework's block resets keeps what the counter held before that reset."""
    meter = _Meter()
    first, second = standin(meter, "standin_a"), standin(meter, "standin_b")
    meter.use(CPU, 100)
    with ds.memory_peak("cpu", backend=first) as outer:
        meter.use(CPU, 900)
        meter.use(CPU, 100)
        with ds.memory_peak("cpu", backend=second) as inner:
            pass
    assert (inner.peak, outer.peak) == (100, 900)


def test_a_reset_block_takes_no_readings_of_its_own(standin):
    """The counter gives its peak: no sampler thread runs while the block does."""
    meter = _Meter()
    name = standin(meter)
    meter.use(GPU0, 100)
    with ds.memory_peak("gpu:0", backend=name) as peak:
        running = _samplers()
    assert peak.method == "reset" and running == [] and (peak.readings, peak.missed) == (0, 0)


def test_a_block_ended_twice_raises_nothing(standin):
    meter = _Meter()
    name = standin(meter)
    meter.use(GPU0, 100)
    peak = ds.memory_peak("gpu:0", backend=name)
    with peak:
        pass
    peak.__exit__(None, None, None)
    assert peak.peak == 100


# ------------------------------------------------------------------ a counter that is not, and none


def test_a_counter_that_rose_in_the_block_gives_an_exact_peak(standin):
    """The framework's peak counter cannot be reset (JAX's): it rose from 300 to 900 inside the
    block, so 900 is the block's peak, with no time unseen."""
    meter = _Meter(resettable=False)
    name = standin(meter)
    meter.use(GPU0, 300)
    meter.use(GPU0, 100)
    with ds.memory_peak("gpu:0", backend=name) as peak:
        meter.use(GPU0, 900)
        meter.use(GPU0, 100)
    assert (peak.method, peak.peak, peak.resolution, peak.reason) == ("counter", 900, 0.0, "")


def test_a_sampled_block_without_a_counter_asks_for_it_once(standin):
    """Where the framework has no peak counter, the block's end reads the bytes in use alone."""
    meter = _Meter(resettable=False, counting=False)
    name = standin(meter)
    meter.use(GPU0, 100)
    with ds.memory_peak("gpu:0", backend=name) as peak:
        pass
    assert peak.method == "sampled" and peak.peak == 100 and meter.asked == 1


def test_a_block_where_nothing_can_be_read_has_no_peak(standin):
    meter = _Meter(resettable=False, counting=False)
    name = standin(meter)
    with ds.memory_peak("gpu:0", backend=name) as peak:
        pass
    assert (peak.method, peak.start, peak.end, peak.peak, peak.added, peak.reason) == (
        "sampled", None, None, None, None, "")


def test_the_sampler_is_a_daemon_thread_named_for_devshim(standin):
    """A block left open does not keep the interpreter from exiting; the thread says whose it is."""
    meter = _Meter(resettable=False, counting=False)
    name = standin(meter)
    meter.use(GPU0, 100)
    with ds.memory_peak("gpu:0", backend=name) as peak:
        running = [thread for thread in _samplers() if thread is peak._sampler]
    assert peak.method == "sampled" and len(running) == 1 and running[0].daemon is True


class _Samples:
    """A sampler's stop event that lets it take `count` readings."""

    def __init__(self, count: int) -> None:
        self.left = count

    def wait(self, timeout) -> bool:
        self.left -= 1
        return self.left < 0

    def set(self) -> None:
        pass


def test_an_outer_sampled_peak_keeps_a_nested_blocks_last_reading(standin, monkeypatch):
    """The nested block read 900 as it ended, between two of the outer block's readings."""
    readings = iter([100, 100,            # outer: start, one sample
                     100, 100, 900,       # inner: start, one sample, end
                     100])                # outer: end
    meter = _Meter(resettable=False, counting=False)
    meter.in_use = lambda adapter, native: next(readings)
    name = standin(meter)
    monkeypatch.setattr(device_memory, "threading", SimpleNamespace(Event=lambda: _Samples(1), Thread=_Inline))
    with ds.memory_peak("gpu:0", backend=name) as outer:
        with ds.memory_peak("gpu:0", backend=name) as inner:
            pass
    assert (inner.peak, inner.end) == (900, 900)
    assert (outer.method, outer.peak, outer.end) == ("sampled", 900, 100)


# ------------------------------------------------------------------ estimates and the batch search


def test_an_estimate_that_does_not_fit_says_so():
    found = device_memory.MemoryEstimate(2048, 1024, "cpu", "counted", capacity=1024)
    assert str(found) == "peak 2.0 KiB on cpu of 1.0 KiB: does not fit (kept after: 1.0 KiB)"


@pytest.mark.parametrize("search", [
    lambda: ds.estimate_memory(lambda: None, capacity="lots"),
    lambda: ds.largest_batch(lambda batch: 0, "lots", progress=False),
])
def test_a_capacity_that_is_not_a_size_is_named_as_the_capacity(search):
    with pytest.raises(ds.VirtualMemorySizeError) as info:
        search()
    assert str(info.value) == (
        "capacity='lots' is not a size: write a positive number of bytes with an optional unit, e.g. "
        "capacity='16GiB' or 64MiB (KiB, MiB, GiB are powers of 1024, kB, MB, GB of 1000).")


def test_the_batch_search_asks_the_framework_it_is_given(standin):
    """`backend` names the framework whose estimates are made, whatever backend is selected."""
    meter = _Meter()
    name = standin(meter)
    found = ds.largest_batch(lambda batch: 100 * batch, 700, backend=name, progress=False)
    assert found.batch == 7 and found.estimate.device == "stand-in:0"
    assert meter.estimated == [1, 2, 4, 8, 6, 7]


def test_the_batch_search_bisects_down_to_the_largest_batch_that_fits(standin):
    meter = _Meter()
    name = standin(meter)
    found = ds.largest_batch(lambda batch: 100 * batch, 700, backend=name, progress=False)
    assert (found.batch, found.estimate.peak, found.capacity) == (7, 700, 700)
    assert found.tried == ((1, 100), (2, 200), (4, 400), (8, 800), (6, 600), (7, 700))


def test_the_batch_search_estimates_each_batch_once_and_none_past_the_limit(standin):
    meter = _Meter()
    name = standin(meter)
    found = ds.largest_batch(lambda batch: batch, "1MiB", limit=4, backend=name, progress=False)
    assert found.batch == 4 and [batch for batch, _ in found.tried] == [1, 2, 4]


def test_the_batch_search_gives_each_batch_what_inputs_makes_of_it(standin):
    meter = _Meter()
    name = standin(meter)
    found = ds.largest_batch(lambda batch, width: batch * width, 1000, inputs=lambda batch: (batch, 100),
                             backend=name, progress=False)
    assert found.batch == 10 and found.estimate.peak == 1000


class _Buffered:
    """stderr that holds what it is given until it is flushed."""

    def __init__(self) -> None:
        self.held, self.shown = "", []

    def write(self, text: str) -> int:
        self.held += text
        return len(text)

    def flush(self) -> None:
        if self.held:
            self.shown.append(self.held)
        self.held = ""


def test_the_batch_search_reports_each_estimate_as_it_ends_with_its_seconds(standin, monkeypatch):
    """Each line is flushed as its estimate ends; its seconds are those the estimate took (on a
    stand-in clock that moves 2.5 s an estimate)."""
    meter = _Meter()
    name = standin(meter)
    stderr = _Buffered()
    ticks = iter(100.0 + 2.5 * i for i in range(100))
    monkeypatch.setattr(device_memory, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    monkeypatch.setattr(device_memory.sys, "stderr", stderr)
    ds.largest_batch(lambda batch: 100 * batch, 250, backend=name)
    assert stderr.held == ""
    assert stderr.shown[0] == ("ds.largest_batch: batch 1: peak 100 B on stand-in:0 of 250 B: fits "
                               "(kept after: 0 B) (2.5 s)\n")
    assert len(stderr.shown) == 4 and all(line.endswith(" (2.5 s)\n") for line in stderr.shown)


def test_a_block_used_again_measures_its_own_run_only(standin):
    """One `MemoryPeak` entered twice: the second run's figures are its own, not the most of both
    (a nested block's 900 bytes in the first run are not the second run's peak)."""
    meter = _Meter()
    name = standin(meter)
    meter.use(GPU0, 100)
    block = ds.memory_peak("gpu:0", backend=name)
    with block:
        with ds.memory_peak("gpu:0", backend=name):
            meter.use(GPU0, 900)
            meter.use(GPU0, 100)
    assert (block.peak, block.added) == (900, 800)
    with block:
        meter.use(GPU0, 150)
    assert (block.start, block.end, block.peak, block.added, block.reason) == (100, 150, 150, 50, "")

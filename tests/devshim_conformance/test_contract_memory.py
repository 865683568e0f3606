"""Conformance: ds.memory, ds.memory_peak, and out of memory in devshim's own calls.

On every device: one record each, figures in bytes or None, consistent with each other. On
GPUs (virtual or real) where the framework says what is in use: new tensors add their own
size to it, within 1% (on virtual GPUs that is the bytes of the live tensors on each), and a
peak block sees them. A framework's out-of-memory error met in ds.to_device or
ds.copy_if_needed comes out as ds.DeviceOutOfMemoryError, the framework's error as its cause.
"""

from __future__ import annotations

import gc
import json
import sys
import time

import numpy as np
import pytest

import devshim as ds

FIELDS = ("in_use", "reserved", "peak", "total", "free")
#: Three float32 tensors of 1 MiB, 512 KiB and 256 KiB: 1.75 MiB in all.
SHAPES = ((512, 512), (256, 512), (128, 512))
NBYTES = sum(4 * a * b for a, b in SHAPES)


def _gpus(harness):
    gpus = ds.devices()[1:]
    if not gpus:
        pytest.skip(f"{harness.name} sees no GPU here; DEVSHIM_VIRTUAL_DEVICES=2 runs this on virtual ones")
    return gpus


def _in_use(device):
    gc.collect()  # tensors dropped in a cycle go now, as they would before memory ran short
    return ds.memory(device).in_use


def _make(harness, device):
    rng = np.random.default_rng(0)
    return [harness.tensor(rng.standard_normal(shape).astype(np.float32), device=device) for shape in SHAPES]


def test_memory_has_one_record_per_device_with_figures_in_bytes(harness):
    records = ds.memory()
    assert [info.device for info in records] == [ds.device(native) for native in ds.devices()]
    for info in records:
        assert isinstance(info, ds.MemoryInfo) and info.source
        for field in FIELDS:
            value = getattr(info, field)
            assert value is None or (type(value) is int and value >= 0), (info.device, field, value)
        if info.total is not None and info.free is not None:
            assert info.free <= info.total, info
        if info.in_use is not None and info.reserved is not None:
            assert info.reserved >= info.in_use, info
        if info.in_use is not None and info.peak is not None:
            assert info.peak >= info.in_use, info
        assert json.loads(json.dumps(info.as_dict()))["device"] == str(info.device)


@pytest.mark.parametrize("spec_kind", ["native", "string", "Device"])
def test_memory_of_one_device_takes_every_spec_form(harness, spec_kind):
    spec = {"native": ds.cpu(), "string": "cpu", "Device": ds.Device("cpu")}[spec_kind]
    info = ds.memory(spec)
    assert isinstance(info, ds.MemoryInfo) and info.device == "cpu:0"


def test_the_host_reports_the_process_and_the_machine(harness):
    info = ds.memory(ds.cpu())
    if sys.platform.startswith("linux"):  # /proc says all of it; elsewhere psutil may be missing
        assert None not in (info.in_use, info.peak, info.total, info.free), info
    if info.in_use is not None and info.total is not None:
        assert 0 < info.in_use and info.free <= info.total


def test_new_tensors_on_a_gpu_add_their_bytes_to_in_use(harness):
    """On virtual GPUs in_use is the live tensors' bytes; on real ones the allocator's count."""
    for gpu in _gpus(harness):
        # The same tensors made and dropped first: a framework's first transfer to a GPU may allocate
        # what every later one reuses (JAX's first random draw on an H200 took 1 MiB more).
        del _make(harness, gpu)[:]
        before = _in_use(gpu)
        if before is None:
            continue  # this framework does not say what is in use on this device (docs/memory.md)
        tensors = _make(harness, gpu)
        added = _in_use(gpu) - before
        assert abs(added - NBYTES) <= 0.01 * NBYTES, (gpu, added, NBYTES)
        del tensors
        assert abs(_in_use(gpu) - before) <= 0.01 * NBYTES, gpu


def test_in_use_is_per_device(harness):
    gpus = _gpus(harness)
    if len(gpus) < 2:
        pytest.skip(f"{harness.name} sees one GPU here; this needs two")
    first, second = gpus[:2]
    before = _in_use(second)
    if before is None:
        pytest.skip(f"{harness.name} does not say what is in use on {ds.device(second)}")
    tensors = _make(harness, first)
    assert abs(_in_use(second) - before) <= 0.01 * NBYTES
    del tensors


def test_a_peak_block_sees_tensors_made_inside_it(harness):
    for device in ds.devices():
        with ds.memory_peak(device) as peak:
            tensors = _make(harness, device)
        assert peak.method in ("reset", "counter", "sampled") and peak.device == ds.device(device)
        if peak.start is None:
            continue  # no figure of what is in use here: no peak either
        if peak.peak is None:  # a sampled peak that could have missed a tensor says why
            assert peak.method == "sampled" and peak.reason, peak
            continue
        assert peak.peak >= max(peak.start, peak.end)
        if peak.device.kind != "cpu":  # the host's resident memory may reuse freed pages
            assert peak.added >= 0.99 * NBYTES, (device, peak)
        del tensors


def test_a_reset_peak_sees_tensors_dropped_inside_the_block(harness):
    for device in ds.devices()[1:]:
        with ds.memory_peak(device) as peak:
            del _make(harness, device)[:]
        if peak.method in ("reset", "counter"):  # exact; a sampled peak may miss so short a life
            assert peak.added >= 0.99 * NBYTES, (device, peak)


def test_a_peak_sees_a_tensor_held_for_a_tenth_of_a_second_or_says_why_not(harness):
    """A sampled peak (TensorFlow's and MXNet's virtual GPUs scan the objects Python holds, which
    can take long) gives no figure rather than one that missed a tensor held for 0.1 s."""
    for device in ds.devices()[1:]:
        with ds.memory_peak(device) as peak:
            tensors = _make(harness, device)
            time.sleep(0.1)
            del tensors
        if peak.start is None:
            continue  # no figure of what is in use here (docs/memory.md)
        if peak.peak is None:
            assert peak.method == "sampled" and peak.resolution > 0.1 and "could have been missed" in peak.reason
        else:
            assert peak.added >= 0.99 * NBYTES and peak.resolution <= 0.1, (device, peak)


def test_nested_peak_blocks_each_see_their_own_and_the_outer_sees_all(harness):
    device = ds.devices()[-1]
    with ds.memory_peak(device) as outer:
        kept = _make(harness, device)
        with ds.memory_peak(device) as inner:
            more = _make(harness, device)
            del more
    assert outer.peak is None or inner.peak is None or outer.peak >= inner.peak >= inner.start
    del kept


def test_an_outer_block_keeps_the_peak_a_nested_block_saw_that_its_own_readings_missed(harness):
    """The outer block reads rarely (every 10 s), so only the inner block's readings can see the
    tensor made and dropped inside it; the outer block's peak must still be at least the inner's."""
    device = ds.devices()[-1]
    with ds.memory_peak(device, interval=10.0) as outer:
        with ds.memory_peak(device) as inner:
            more = _make(harness, device)
            time.sleep(0.02)
            del more
    if outer.peak is None or inner.peak is None:
        assert outer.start is None or outer.reason or inner.reason, (outer, inner)
        return
    assert outer.peak >= inner.peak, (outer, inner)
    if inner.method != "reset":  # a sampled or counted inner peak saw the tensor, so the outer one has it
        assert outer.peak - outer.start >= 0.99 * NBYTES or inner.peak - inner.start < 0.99 * NBYTES, (outer, inner)


def test_out_of_memory_in_to_device_is_named_with_the_framework_error_as_cause(harness):
    error = harness.out_of_memory()
    if error is None:
        pytest.skip(f"the {harness.name} harness makes no out-of-memory error")
    assert ds.backends.memory(harness.name).is_out_of_memory(error)

    class Fails:  # a leaf whose .to() runs out of memory, as a framework's copy would
        def to(self, device, **_):
            raise error

    target = ds.devices()[-1]
    for call in (ds.to_device, ds.copy_if_needed):
        with pytest.raises(ds.DeviceOutOfMemoryError) as info:
            call({"batch": [Fails()]}, target)
        assert info.value.__cause__ is error and isinstance(info.value, (MemoryError, RuntimeError))
        assert isinstance(info.value, MemoryError) and isinstance(info.value, RuntimeError)
        assert info.value.device == ds.device(target) and info.value.call == f"ds.{call.__name__}"
        message = str(info.value)
        assert f"{info.value.device} out of memory." in message and "smaller batch" in message
        # Worded as the batch-size finders look for it (accelerate's should_reduce_batch_size,
        # Lightning's is_oom_error): a RuntimeError whose one argument says " out of memory." and CUDA.
        assert info.value.args == (message,) and "CUDA" in message


def test_other_errors_in_to_device_pass_unchanged(harness):
    class Fails:
        def to(self, device, **_):
            raise ValueError("not a memory problem")

    with pytest.raises(ValueError, match="not a memory problem") as info:
        ds.to_device([Fails()], ds.cpu())
    assert not isinstance(info.value, ds.DeviceOutOfMemoryError)


def test_an_estimate_answers_without_the_memory_or_refuses_by_name(harness):
    """ds.estimate_memory answers where the backend's memory.py can estimate (its `estimate`), and
    otherwise refuses with MemoryEstimateUnsupportedError naming the framework."""
    from devshim.backends.memory_base import DeviceMemory

    def step(rows):
        return harness.tensor(np.ones((rows, 1024), np.float32), device=ds.cpu())  # 4 KiB a row

    contract = ds.backends.memory(harness.name)
    if contract is None or type(contract).estimate is DeviceMemory.estimate:
        with pytest.raises(ds.MemoryEstimateUnsupportedError) as info:
            ds.estimate_memory(step, 256)
        title = ds.get_backend(harness.name).spec.title
        assert title in str(info.value) and "ds.memory_peak" in str(info.value)
        return
    found = ds.estimate_memory(step, 256, capacity=2**20 - 1)
    assert found.peak >= 256 * 4096 and found.kept >= 256 * 4096 and found.fits is False, found
    assert ds.estimate_memory(step, 16, capacity="1MiB").fits

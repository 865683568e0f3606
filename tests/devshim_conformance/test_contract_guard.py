"""Conformance: ds.transfer_guard on every backend that has one, on two distinct devices
(real GPUs, or virtual ones: these tests run in the virtual tox pass)."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

import devshim as ds


@pytest.fixture
def guarded(harness, two_devices):
    if not ds.get_backend().spec.has_module("guard"):
        pytest.skip(f"{harness.name} has no transfer guard (nothing on it can move implicitly)")
    first, second = two_devices
    accelerator = second if ds.get_backend().describe(second).kind != "cpu" else first
    if ds.get_backend().describe(accelerator).kind == "cpu":
        pytest.skip(f"{harness.name} has no accelerator here, real or virtual")
    return first, second, accelerator


def test_a_mixed_device_op_is_refused_under_disallow(harness, guarded):
    first, second, _ = guarded
    x, y = harness.tensor([1.0, 2.0], device=first), harness.tensor([3.0, 4.0], device=second)
    if not harness.guard_sees_ops:
        with ds.transfer_guard("disallow") as report:
            with pytest.raises(Exception):  # the framework refuses committed inputs itself
                harness.add(x, y)
        assert report.total == 0
        return
    with ds.transfer_guard("disallow") as report:
        with pytest.raises(ds.DeviceMismatchError) as info:
            harness.add(x, y)
    message = str(info.value)
    assert str(ds.neutral_device(x)) in message or str(ds.neutral_device(y)) in message
    assert "ds.copy_if_needed" in message and isinstance(info.value, RuntimeError)
    assert report.total == 1 and report.events[0].action == "refused"
    site = report.events[0].site  # the code that ran the op: here, the harness's add()
    path, _, line = site.rpartition(":")
    assert path == inspect.getsourcefile(type(harness).add) and line.isdigit(), site


def test_a_mixed_device_op_runs_under_allow_and_is_counted_under_log(harness, guarded):
    first, second, _ = guarded
    x, y = harness.tensor([1.0, 2.0], device=first), harness.tensor([3.0, 4.0], device=second)
    with ds.transfer_guard("allow") as report:
        if harness.runs_mixed_ops:
            harness.add(x, y)
    assert report.total == 0
    if not harness.guard_sees_ops:
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ds.transfer_guard("log") as report:
            for _ in range(3):
                try:
                    harness.add(x, y)
                except RuntimeError:
                    assert not harness.runs_mixed_ops  # the framework's own refusal
    warned = [w for w in caught if issubclass(w.category, ds.ImplicitTransferWarning)]
    if not harness.runs_mixed_ops:  # refused: nothing moved, so nothing is logged
        assert report.total == 0 and not warned, (str(report), [str(w.message) for w in warned])
        return
    assert report.total >= 3 and report.total % 3 == 0  # each run counted (one event per moved input)
    assert all(e.action == "logged" for e in report.events)
    assert len(warned) == 1  # once per site


def test_log_reports_no_transfer_for_a_mixed_device_op_that_raised(harness, guarded):
    """An op the framework refuses (here: shapes that do not broadcast, on two devices) ran
    nowhere: under "log" it is neither warned about nor counted; "disallow" still refuses it
    first, with devshim's error."""
    first, second, _ = guarded
    x, y = harness.tensor([1.0, 2.0], device=first), harness.tensor([3.0, 4.0, 5.0], device=second)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ds.transfer_guard("log") as report:
            with pytest.raises(Exception) as info:
                harness.add(x, y)
    assert not isinstance(info.value, AssertionError)
    warned = [str(w.message) for w in caught if issubclass(w.category, ds.ImplicitTransferWarning)]
    assert report.total == 0 and not warned, (str(report), warned)
    if harness.guard_sees_ops:
        with ds.transfer_guard("disallow") as report:
            with pytest.raises(ds.DeviceMismatchError):
                harness.add(x, y)
        assert report.total == 1 and report.events[0].action == "refused"


@pytest.mark.parametrize("form", range(9))
def test_each_host_read_is_refused_under_disallow_and_logged_under_log(harness, guarded, form):
    reads = harness.host_reads()
    if form >= len(reads):
        pytest.skip(f"{harness.name} has {len(reads)} host-read forms")
    how, read = reads[form]
    _, _, accelerator = guarded
    x = harness.tensor(2.0, device=accelerator)
    with ds.transfer_guard("disallow") as report:
        with pytest.raises(ds.ImplicitTransferError, match="ds.to_numpy") as info:
            read(x)
    what = report.events[0].what  # the guard's words for the read (the harness's `how` is its own)
    assert what and what in str(info.value) and str(ds.neutral_device(x)) in str(info.value), how
    assert report.counts["device-to-host read"] == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ds.ImplicitTransferWarning)
        with ds.transfer_guard("log") as report:
            value = read(x)
    assert report.counts["device-to-host read"] == 1 and report.events[0].action == "logged"
    expected = read(ds.to_device(x, ds.cpu()))  # the same read of a host copy: no transfer
    if isinstance(expected, np.ndarray):
        np.testing.assert_array_equal(value, expected)
    elif not isinstance(expected, str):
        assert value == expected


def test_host_reads_of_host_tensors_are_no_transfers(harness, guarded):
    x = harness.tensor(2.0, device=ds.cpu())
    with ds.transfer_guard("disallow") as report:
        for _, read in harness.host_reads():
            read(x)
    assert report.total == 0


def test_devshims_explicit_calls_pass_under_disallow(harness, guarded):
    first, second, accelerator = guarded
    x = harness.tensor([1.0, 2.0], device=first)
    with ds.transfer_guard("disallow") as report:
        y = ds.to_device(x, second)
        z = ds.copy_if_needed({"x": x}, second)["x"]
        host = ds.to_numpy(y)
        back = ds.copy_if_needed(z, first)
        harness.run_on(first, lambda: harness.add(back, x))  # (TensorFlow: under first's scope)
        ds.synchronize(y)
    np.testing.assert_array_equal(host, [1.0, 2.0])
    assert ds.same_device(y, z) and report.total == 0


def test_levels_are_restored_after_a_block_even_when_it_raises(harness, guarded):
    _, _, accelerator = guarded
    # Two tensors: a value read once may stay on the host (JAX keeps a GPU array's host copy, and
    # reading it again is no transfer), so the refusal is asked of a value never read.
    x, unread = harness.tensor(2.0, device=accelerator), harness.tensor(3.0, device=accelerator)
    with ds.transfer_guard("disallow"):
        with pytest.raises(KeyError):
            with ds.transfer_guard("allow"):
                float(x)  # allowed here
                raise KeyError("boom")
        with pytest.raises(ds.ImplicitTransferError):
            float(unread)
    assert float(unread) == 3.0  # no guard any more


def test_one_direction_can_be_allowed_alone(harness, guarded):
    first, second, accelerator = guarded
    x = harness.tensor(2.0, device=accelerator)
    with ds.transfer_guard("disallow", device_to_host="allow") as report:
        assert float(x) == 2.0
    assert report.total == 0 and report.levels["device_to_host"] == "allow"

"""The D2L GPU experiments: each runs on every backend with tiny sizes and returns well-formed rows."""

from __future__ import annotations

import json

import numpy as np
import pytest

import devshim as ds
from devshim import experiments

FAST = {"min_run_time": 0.003}


def _name(device):
    described = ds.get_backend().describe(device)
    return f"{described} (virtual)" if described.virtual else str(described)


def _json_ready(rows):
    assert json.loads(json.dumps(rows)) == rows


def test_matmul_rows_cover_each_device_and_size(harness):
    rows = experiments.matmul([4, 8], **FAST)
    devices = [_name(d) for d in ds.devices()]
    assert [(r["device"], r["size"]) for r in rows] == [(d, n) for d in devices for n in (4, 8)]
    for row in rows:
        assert row["backend"] == harness.name
        assert row["seconds"] > 0
        assert row["gflops"] == pytest.approx(2 * row["size"] ** 3 / row["seconds"] / 1e9)
    cpu_rows = [r for r in rows if r["device"] == "cpu:0"]
    assert all(r["cpu_over_device"] == 1.0 for r in cpu_rows)
    _json_ready(rows)


def test_logging_reads_the_host_once_per_step_versus_once(harness):
    rows = experiments.logging(steps=5, size=4, **FAST)
    assert [r["variant"] for r in rows] == ["log to host each step", "log on device, move once"]
    assert [r["host_reads"] for r in rows] == [5, 1]
    assert rows[1]["slowdown"] == 1.0
    assert rows[0]["slowdown"] == pytest.approx(rows[0]["seconds"] / rows[1]["seconds"])
    assert all(r["seconds"] > 0 and r["steps"] == 5 and r["size"] == 4 for r in rows)
    _json_ready(rows)


def test_every_host_read_goes_through_one_hookable_door(harness, monkeypatch):
    doors, counts, values = [], [], []
    original = experiments.HostReads.read

    def watched(self, x):
        if not any(door is self for door in doors):
            doors.append(self)
            counts.append(0)
        counts[next(i for i, door in enumerate(doors) if door is self)] += 1
        values.append(original(self, x))
        return values[-1]

    monkeypatch.setattr(experiments.HostReads, "read", watched)
    rows = experiments.logging(steps=3, size=4, min_run_time=0.001)
    assert [r["host_reads"] for r in rows] == [3, 1]
    # per variant: a counted run through a door of its own, then every timed run through another
    host_counted, host_timed, device_counted, device_timed = counts
    assert (host_counted, device_counted) == (3, 1)
    assert host_timed % 3 == 0 and host_timed >= 3 and device_timed >= 1
    assert all(isinstance(v, np.ndarray) for v in values)  # each read is an explicit ds.to_numpy


def test_parallel_compares_sequence_with_two_at_once(harness):
    rows = experiments.parallel(size=8, repeats=2, **FAST)
    assert [r["variant"] for r in rows] == ["in sequence on one device", "at once on two devices"]
    assert rows[0]["speedup"] == 1.0
    assert rows[1]["speedup"] == pytest.approx(rows[0]["seconds"] / rows[1]["seconds"])
    assert " + " in rows[1]["devices"]
    if ds.num_gpus() < 2:
        assert rows[1]["note"] == "one device only: both streams share it"
    _json_ready(rows)


def test_transfer_measures_both_directions_per_size(harness):
    rows = experiments.transfer([0.01, 0.02], **FAST)
    assert [r["direction"] for r in rows] == ["host->device", "device->host"] * 2
    for row in rows:
        nbytes = row["megabytes"] * 2**20
        assert row["gb_per_s"] == pytest.approx(nbytes / row["seconds"] / 1e9)
    assert rows[0]["megabytes"] < rows[2]["megabytes"]
    assert {r["device"] for r in rows} == {_name(ds.try_gpu())}
    _json_ready(rows)


def test_overhead_compares_devshim_with_the_native_call(harness):
    rows = experiments.overhead(min_run_time=0.002, rounds=1)
    assert [r["operation"] for r in rows] == [
        "device_of", "copy_if_needed (no move)", "to_device 64 B", "to_device 1 MiB", "to_device nest of 8",
    ]
    for row in rows:
        assert row["backend"] == harness.name and row["devshim_seconds"] > 0
        if row["native_seconds"] is None:
            assert row["ratio"] is None
        else:
            assert row["ratio"] == pytest.approx(row["devshim_seconds"] / row["native_seconds"])
    _json_ready(rows)


def test_progress_is_reported_from_zero_to_done(harness):
    reports = []
    experiments.matmul([4, 8], progress=lambda *r: reports.append(r), **FAST)
    total = 2 * len(ds.devices())
    assert reports[0][:2] == (0, total) and reports[-1] == (total, total, "done")
    assert [r[0] for r in reports] == list(range(total + 1))


def test_the_experiments_accept_a_device(harness):
    rows = experiments.transfer([0.01], device="cpu", **FAST)
    assert {r["device"] for r in rows} == {"cpu:0"}
    assert {r["device"] for r in experiments.matmul([4], devices=["cpu"], **FAST)} == {"cpu:0"}


@pytest.mark.parametrize("call, match", [
    (lambda: experiments.matmul([]), "matmul sizes"),
    (lambda: experiments.matmul([0]), "matmul sizes"),
    (lambda: experiments.transfer([-1]), "transfer sizes"),
    (lambda: experiments.logging(steps=0), "steps"),
    (lambda: experiments.parallel(repeats=0), "repeats"),
    (lambda: experiments.overhead(rounds=0), "rounds"),
])
def test_bad_parameters_are_devshim_errors(harness, call, match):
    with pytest.raises(ds.DevshimError, match=match):
        call()


def test_ops_table_names_its_backend(harness):
    ops = experiments.ops_for()
    assert ops.name == harness.name
    a = ops.rand((3, 3), ds.cpu())
    assert ds.device_of(ops.matmul(a, a)) == "cpu"
    assert harness.shape(ops.stack([ops.norm(a), ops.norm(a)])) in ((2,), (2, 1))

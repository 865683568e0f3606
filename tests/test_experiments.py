"""The experiments of ``devshim bench``: each runs on every backend with tiny sizes and returns
well-formed rows carrying their spread; each module declares its options, columns and plot."""

from __future__ import annotations

import json

import numpy as np
import pytest

import devshim as ds
from devshim.bench import experiment as shared
from devshim.bench import measure as measuring
from devshim.bench.experiment import BarPlot, Column, Experiment, LinePlot
from devshim.bench import threads
from devshim.bench.experiments import experiments, transfer
from devshim.timing import compare

FAST = {"min_run_time": 0.003}
run = {name: e.run for name, e in experiments().items()}


def _name(device):
    described = ds.get_backend().describe(device)
    return f"{described} (virtual)" if described.virtual else str(described)


def _json_ready(rows):
    assert json.loads(json.dumps(rows)) == rows


def _has_spread(row, key="seconds"):
    q1, q3 = row[f"{key}_q1"], row[f"{key}_q3"]
    assert q1 <= row[key] <= q3 and row[f"{key}_iqr"] == pytest.approx(q3 - q1)
    assert isinstance(row["noisy"], bool) and 1 <= row["tries"] <= measuring.TRIES


def test_every_experiment_module_declares_itself():
    found = experiments()
    assert list(found)[:7] == ["matmul", "logging", "parallel", "transfer", "overhead", "guard", "startup"]
    for name, declared in found.items():
        assert isinstance(declared, Experiment) and declared.name == name
        assert callable(declared.run) and declared.summary
        assert declared.columns and all(isinstance(c, Column) for c in declared.columns)
        assert isinstance(declared.plot, (LinePlot, BarPlot))
        assert declared.run.__doc__ and "Example" in declared.run.__doc__


def test_matmul_rows_cover_each_device_and_size(harness):
    rows = run["matmul"]([4, 8], **FAST)
    devices = [_name(d) for d in ds.devices()]
    assert [(r["device"], r["size"]) for r in rows] == [(d, n) for d in devices for n in (4, 8)]
    for row in rows:
        assert row["backend"] == harness.name
        assert row["seconds"] > 0
        _has_spread(row)
        assert row["gflops"] == pytest.approx(2 * row["size"] ** 3 / row["seconds"] / 1e9)
        assert row["gflops_low"] <= row["gflops"] <= row["gflops_high"]
    cpu_rows = [r for r in rows if r["device"] == "cpu:0"]
    assert all(r["cpu_over_device"] == 1.0 for r in cpu_rows)
    _json_ready(rows)


def _ratio_with_spread(row, key):
    """A ratio measured side by side: the median of the per-pair ratios, inside their quartiles."""
    assert 0 < row[f"{key}_low"] <= row[key] * 1.000001 and row[key] <= row[f"{key}_high"] * 1.000001
    assert isinstance(row["stalled"], bool) and isinstance(row["noisy"], bool)


def test_logging_reads_the_host_once_per_step_versus_once(harness):
    rows = run["logging"](steps=5, size=4, **FAST)
    assert [r["variant"] for r in rows] == ["log to host each step", "log on device, move once"]
    assert [r["host_reads"] for r in rows] == [5, 1]
    assert rows[1]["slowdown"] == 1.0
    _ratio_with_spread(rows[0], "slowdown")
    assert all(r["seconds"] > 0 and r["steps"] == 5 and r["size"] == 4 for r in rows)
    for row in rows:
        _has_spread(row)
    _json_ready(rows)


def test_every_host_read_goes_through_one_hookable_door(harness, monkeypatch):
    doors, counts, values = [], [], []
    original = shared.HostReads.read

    def watched(self, x):
        if not any(door is self for door in doors):
            doors.append(self)
            counts.append(0)
        counts[next(i for i, door in enumerate(doors) if door is self)] += 1
        values.append(original(self, x))
        return values[-1]

    monkeypatch.setattr(shared.HostReads, "read", watched)
    rows = run["logging"](steps=3, size=4, min_run_time=0.001)
    assert [r["host_reads"] for r in rows] == [3, 1]
    assert counts[:2] == [3, 1]  # each variant's counted run: 3 reads, then 1
    assert set(counts[2:]) == {3, 1}  # then the measured runs of both, taking turns
    assert all(isinstance(v, np.ndarray) for v in values)  # each read is an explicit ds.to_numpy


def test_parallel_compares_sequence_with_two_at_once(harness):
    rows = run["parallel"](size=8, repeats=2, **FAST)
    assert rows[0]["variant"] == "in sequence on one device" and rows[0]["speedup"] == 1.0
    _ratio_with_spread(rows[1], "speedup")
    if ds.num_gpus() < 2:
        assert rows[1]["variant"] == "at once on one device"
        assert rows[1]["note"] == "one device only: both streams share it"
        assert rows[1]["devices"].endswith(" twice")
    else:
        assert rows[1]["variant"] == "at once on two devices" and " + " in rows[1]["devices"]
    _json_ready(rows)


def test_parallel_on_the_same_device_twice_is_labelled(harness):
    rows = run["parallel"](size=8, repeats=1, devices=["cpu", "cpu"], **FAST)
    assert rows[1]["variant"] == "at once on one device" and rows[1]["devices"] == "cpu:0 twice"
    with pytest.raises(ds.ExperimentError, match="one or two devices"):
        run["parallel"](devices=["cpu"] * 3)


def test_transfer_measures_both_directions_per_size(harness):
    rows = run["transfer"]([0.01, 0.02], **FAST)
    if ds.get_backend().describe(ds.try_gpu()).kind == "cpu":
        assert rows == [{"backend": harness.name, "omitted": transfer.no_device_line(harness.name)}]  # no device: no transfer
        return
    assert [r["direction"] for r in rows] == ["host->device", "device->host"] * 2
    for row in rows:
        nbytes = row["megabytes"] * 2**20
        assert row["gb_per_s"] == pytest.approx(nbytes / row["seconds"] / 1e9)
        assert row["gb_per_s_low"] <= row["gb_per_s"] <= row["gb_per_s_high"]
    assert rows[0]["megabytes"] < rows[2]["megabytes"]
    assert {r["device"] for r in rows} == {_name(ds.try_gpu())}
    _json_ready(rows)


def test_overhead_compares_devshim_with_the_native_call(harness):
    rows = run["overhead"](min_run_time=0.002)
    assert [r["operation"] for r in rows] == [
        "device_of", "copy_if_needed (no copy)", "to_device 64 B", "to_device 1 MiB",
        "to_device nest of 8", "to_device dict of 1000",
    ]
    for row in rows:
        assert row["backend"] == harness.name and row["devshim_seconds"] > 0
        if row["native_seconds"] is None:
            assert row["ratio"] is None
        else:
            _ratio_with_spread(row, "ratio")
            assert row["pairs"] >= compare.MIN_PAIRS and row["native_seconds"] > 0
        # one thread where torch computes on the host (cpu:0, a virtual GPU); NumPy cannot be set
        expected = (1 if harness.name == "torch" else None) if threads.on_host(row) else "absent"
        assert row.get("threads", "absent") == expected
    _json_ready(rows)


def test_guard_measures_each_condition_or_says_there_is_no_guard(harness):
    rows = run["guard"](size=4, min_run_time=0.002)
    if not ds.get_backend().spec.has_module("guard"):
        assert rows == [{"backend": harness.name, "operation": "-", "condition": "-",
                         "note": f"{harness.name} has no transfer guard"}]
        return
    assert [(r["operation"], r["condition"]) for r in rows] == [
        (op, c) for op in ("add (same device)", "host read of a host tensor")
        for c in ("no guard", "allow block", "disallow block")]
    for row in rows:
        _has_spread(row)
        if row["condition"] == "no guard":
            assert (row["ratio"], row["over_unguarded"]) == (1.0, 0.0)
            assert row["unguarded_seconds"] == row["seconds"]
        else:  # each guarded condition side by side with the unguarded op: per-pair ratios
            _ratio_with_spread(row, "ratio")
            assert row["pairs"] >= compare.MIN_PAIRS
            assert row["over_unguarded"] == pytest.approx(row["unguarded_seconds"] * (row["ratio"] - 1))
    _json_ready(rows)


@pytest.mark.same_in_every_pass  # fresh interpreters that select no backend
def test_startup_measures_fresh_interpreters():
    rows = run["startup"](min_run_time=0.05)
    assert [r["case"] for r in rows] == ["python -c pass", "import devshim", "import devshim; devshim.cpu()"]
    assert rows[0]["over_bare"] == 0.0
    assert all(r["seconds"] > 0 for r in rows)
    _json_ready(rows)


@pytest.mark.same_in_every_pass  # torch's virtual GPUs, in a fresh interpreter
def test_virtual_times_one_lenet_epoch_on_the_cpu_and_on_a_virtual_gpu():
    if "torch" not in ds.available_backends():
        rows = run["virtual"](examples=32, batch_size=16, **FAST)
        assert rows == [{"backend": "torch", "device": "-",
                         "note": "torch is not installed: no virtual torch GPU to time"}]
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        rows = run["virtual"](examples=32, batch_size=16, clock="cpu", **FAST)
        assert torch.get_num_threads() == 2   # measured on one thread, then put back
    finally:
        torch.set_num_threads(before)
    _json_ready(rows)
    assert [r["device"] for r in rows] == ["cpu:0", "gpu:0 (virtual)"]
    in_a_child = ds.settings.virtual_device_count() < 1
    for row in rows:
        _has_spread(row)
        assert (row["examples"], row["batch_size"], row["threads"], row["clock"]) == (32, 16, 1, "cpu")
        assert ("child process" in row["note"]) == in_a_child
    cpu, gpu = rows
    assert (cpu["vs_cpu"], cpu["vs_cpu_low"], cpu["vs_cpu_high"]) == (1.0, 1.0, 1.0)
    _ratio_with_spread(gpu, "vs_cpu")  # the median of the per-round ratios, inside their quartiles
    assert gpu["pairs"] == cpu["pairs"] >= compare.MIN_PAIRS
    assert gpu["last_loss"] == pytest.approx(cpu["last_loss"], rel=1e-4)   # the same epoch on both


class _StallingSecond:
    """`compare` on a fake clock: the first side costs 1 ms a call, the second 1.25 ms, and
    four in ten of the second side's measured calls (those after its warm-up: a first call
    and three agreeing blocks) stall to three times that, as a machine that jumps between
    states would. The real functions still run (the experiment's own code is what is
    tested); only the times are fake."""

    MS, WARM_UP_CALLS = 1e-3, 4

    def __init__(self) -> None:
        self.real = compare.compare
        self.pairs: list = []

    def __call__(self, first, second, **options):
        now = [0.0]
        calls = iter(range(-self.WARM_UP_CALLS, 10**9))

        def steady():
            out = first()
            now[0] += self.MS
            return out

        def stalling():
            out = second()
            k = next(calls)
            now[0] += 1.25 * self.MS * (3 if k >= 0 and (k * 3) % 10 < 4 else 1)
            return out

        c = self.real(steady, stalling, **{**options, "clock": lambda: now[0]})
        self.pairs.append(len(c.ratios))
        return c


def _marked_as_stalled(experiment, rows, stalled_rows):
    from devshim.bench.table import STALLED_MARK, format_table, row_marks

    for row in stalled_rows:
        assert row["stalled"] and row["noisy"] and STALLED_MARK in row_marks(row)  # the plot's marks too
    lines = format_table(experiment, rows).splitlines()
    assert sum(STALLED_MARK in line.split("|")[1] for line in lines[2:2 + len(rows)]) == len(stalled_rows)
    assert any(line.startswith(f"{STALLED_MARK} runs stalled: ") for line in lines)


def test_guard_and_virtual_rows_carry_the_comparisons_spread_and_its_stall_mark(harness, monkeypatch):
    """A guarded condition, or the virtual GPU's epoch, whose runs jump to a slower state in
    four pairs of ten: the row's ratio is the median of the per-pair ratios with their
    quartiles (1.25 and 3.75), and the row is marked stalled in the table and the plot."""
    from devshim.bench.experiments import guard, virtual

    fake = _StallingSecond()
    monkeypatch.setattr(measuring, "compare", fake)
    if ds.get_backend().spec.has_module("guard"):
        monkeypatch.setattr(guard, "BATCH", 2)
        rows = run["guard"](size=4, min_run_time=0.002)
        guarded = [r for r in rows if r["condition"] != "no guard"]
        for row in guarded:
            assert row["ratio_low"] == pytest.approx(1.25) and row["ratio_high"] == pytest.approx(3.75)
            assert row["ratio_low"] <= row["ratio"] <= row["ratio_high"] and row["tries"] == measuring.TRIES
            assert row["over_unguarded"] == pytest.approx(row["unguarded_seconds"] * (row["ratio"] - 1))
            assert row["unguarded_seconds"] == pytest.approx(fake.MS / 2)  # per op: a batch of 2
        assert all(not r["stalled"] for r in rows if r["condition"] == "no guard")
        _marked_as_stalled(experiments()["guard"], rows, guarded)
    if harness.name != "torch":
        return
    rows = virtual.measure_here(16, 16, 10, 1, min_run_time=0.002)
    cpu, gpu = rows
    assert (gpu["vs_cpu_low"], gpu["vs_cpu_high"]) == pytest.approx((1.25, 3.75)) and gpu["pairs"] >= 10
    assert cpu["vs_cpu"] == 1.0 and gpu["seconds"] > cpu["seconds"]
    _marked_as_stalled(experiments()["virtual"], rows, rows)  # both rows hold the one comparison


def test_progress_is_reported_from_zero_to_done(harness):
    reports = []
    run["matmul"]([4, 8], progress=lambda *r: reports.append(r), **FAST)
    total = 2 * len(ds.devices())
    assert reports[0][:2] == (0, total) and reports[-1] == (total, total, "done")
    assert [r[0] for r in reports] == list(range(total + 1))


def test_the_experiments_accept_a_device(harness):
    rows = run["transfer"]([0.01], device="cpu", **FAST)
    assert rows == [{"backend": harness.name, "omitted": transfer.no_device_line(harness.name)}]  # the host to itself
    assert {r["device"] for r in run["matmul"]([4], devices=["cpu"], **FAST)} == {"cpu:0"}


@pytest.mark.parametrize("name, kwargs, match", [
    ("matmul", {"sizes": []}, "matmul sizes"),
    ("matmul", {"sizes": [0]}, "matmul sizes"),
    ("transfer", {"sizes_mb": [-1]}, "transfer sizes"),
    ("logging", {"steps": 0}, "steps"),
    ("parallel", {"repeats": 0}, "repeats"),
    ("overhead", {"threads": 0}, "threads"),
    ("virtual", {"rounds": 0}, "rounds"),
    ("virtual", {"rounds": 1}, "rounds .*must be at least 10"),
    ("virtual", {"batch_size": 0}, "batch_size"),
    ("virtual", {"threads": -1}, "threads"),
    ("virtual", {"clock": "sundial"}, "clock must be one of wall, cpu"),
])
def test_bad_parameters_are_devshim_errors(harness, name, kwargs, match):
    with pytest.raises(ds.ExperimentError, match=match):
        run[name](**kwargs)


def test_the_ops_module_names_its_operations(harness):
    ops = shared.ops_for(harness.name)
    a = ops.rand((4, 3), ds.cpu())
    assert ds.neutral_device(ops.matmul(a, ops.stack([a[0], a[1], a[2]]))) == "cpu"
    pieces = ops.split(a, [1, 3])
    assert [harness.shape(p) for p in pieces] == [(1, 3), (3, 3)]
    np.testing.assert_allclose(harness.values(ops.concat(pieces)), harness.values(a))
    np.testing.assert_allclose(harness.values(ops.add(a, a)), 2 * harness.values(a))
    assert float(ds.to_numpy(ops.norm(a))) == pytest.approx(np.linalg.norm(harness.values(a)), rel=1e-5)


def test_a_noisy_measurement_is_measured_again_and_flagged(monkeypatch):
    spreads = iter([0.6, 0.4, 0.3])  # three tries whose IQR / median is 0.3, 0.2, 0.15

    def fake_benchmark(fn, *args, **kwargs):
        share = next(spreads)
        m = ds.Measurement([1.0 - share / 2, 1.0, 1.0 + share / 2], number_per_run=1)
        return m

    monkeypatch.setattr(measuring, "benchmark", fake_benchmark)
    m = measuring.measure(lambda: None, min_run_time=0.01)
    assert m.tries == measuring.TRIES and m.noisy
    assert m.iqr / m.median == pytest.approx(0.15)  # the steadiest of the three was kept


def test_a_steady_measurement_is_taken_once(monkeypatch):
    calls = []

    def fake_benchmark(fn, *args, **kwargs):
        calls.append(1)
        return ds.Measurement([1.0, 1.01, 1.02], number_per_run=1)

    monkeypatch.setattr(measuring, "benchmark", fake_benchmark)
    m = measuring.measure(lambda: None, min_run_time=0.01)
    assert (m.tries, m.noisy, len(calls)) == (1, False, 1)


def test_an_experiment_needs_an_ops_module(monkeypatch):
    spec = ds.get_backend("numpy").spec
    monkeypatch.setattr(type(spec), "has_module", lambda self, module: module != "ops")
    with pytest.raises(ds.ExperimentError, match="has no ops module"):
        shared.ops_for("numpy")


def test_threads_are_set_while_measuring_and_put_back(harness):
    """torch measures on one thread by default (as torch.utils.benchmark), or on --threads N, and
    its own setting is put back; a framework that cannot change its threads while running says
    so when asked to."""
    if harness.name != "torch":
        with pytest.raises(ds.ExperimentError, match="cannot change its CPU threads while running"):
            run["matmul"]([4], threads=2, **FAST)
        assert all(r["threads"] is None for r in run["matmul"]([4], **FAST) if r["device"] == "cpu:0")
        return
    import torch

    before = torch.get_num_threads()
    seen = []
    original = threads.ops_for("torch").matmul

    def watched(a, b):
        seen.append(torch.get_num_threads())
        return original(a, b)

    ops = threads.ops_for("torch")
    ops.matmul = watched
    try:
        one = run["matmul"]([4], devices=[], **FAST)
        assert set(seen) == {1} and one[0]["threads"] == 1
        seen.clear()
        two = run["matmul"]([4], devices=[], threads=2, **FAST)
        assert set(seen) == {2} and two[0]["threads"] == 2
    finally:
        ops.matmul = original
    assert torch.get_num_threads() == before

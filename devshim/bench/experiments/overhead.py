"""devshim's own cost, against the framework's native call, as ratios measured in one run."""

from __future__ import annotations

import devshim as ds
from devshim.backends import get_backend
from devshim.bench.experiment import (
    BarPlot, Column, Experiment, Option, Steps, check_count, device_name, native_device, ops_for,
)
from devshim.bench.measure import measure

NEST_LEAVES = 1000


def run(*, backend=None, device=None, min_run_time: float = 0.05, rounds: int = 3,
        progress=None) -> list:
    """devshim's ``device_of``, ``copy_if_needed`` and ``to_device`` against the native call.

    Cases: ``device_of``; ``copy_if_needed`` when nothing has to be copied;
    ``to_device`` of a small (64 B) and a 1 MiB tensor; ``to_device`` of a
    nest of 8 small tensors, and of a dict of 1000 small tensors against a
    dict comprehension of native copies. Each native side is the expression a
    user writes (``t.device``, ``t.to(dev)``, ``np.asarray(a)``) inline in the
    timed callable, from the backend's ``ops.native_calls``. Native and devshim runs alternate for
    ``rounds`` rounds; each keeps its fastest median, which resists bursts of
    load from elsewhere. Rows: operation, native_seconds and devshim_seconds
    (each with its IQR), ratio (devshim / native; None when the framework has
    no native equivalent) with ratio_low/high from the quartiles.

    Example:
        >>> for row in run():
        ...     print(row["operation"], f"{row['ratio']:.2f}x")
    """
    check_count(rounds, "rounds")
    adapter = get_backend(backend)
    name, ops = adapter.name, ops_for(adapter.name)
    target = adapter.try_gpu() if device is None else native_device(device, name)
    host = adapter.cpu()

    def placed(shape):
        return ds.to_device(ops.rand(shape, host), target)

    small, large = placed((16,)), placed((512, 512))
    nest = {"inputs": [placed((4, 4)) for _ in range(4)], "targets": [placed((4,)) for _ in range(4)]}
    leaves = {f"w{i}": placed((16,)) for i in range(NEST_LEAVES)}
    # The baselines are what a user writes (t.device, t.to(dev), np.asarray(a)), each inline in
    # its own callable (ops.native_calls), so no helper call is added to the native side.
    native_small, native_large = ops.native_calls(small, target), ops.native_calls(large, target)
    copy_dict, copy_lists = ops.native_copy_dict, ops.native_copy_lists
    cases = [
        ("device_of", native_small["device_of"], lambda: ds.device_of(small)),
        ("copy_if_needed (no copy)", native_small["copy_if_needed"], lambda: ds.copy_if_needed(small, target)),
        ("to_device 64 B", native_small["to_device"], lambda: ds.to_device(small, target)),
        ("to_device 1 MiB", native_large["to_device"], lambda: ds.to_device(large, target)),
        ("to_device nest of 8", lambda: copy_lists(nest, target), lambda: ds.to_device(nest, target)),
        (f"to_device dict of {NEST_LEAVES}", lambda: copy_dict(leaves, target), lambda: ds.to_device(leaves, target)),
    ]
    rows: list = []
    plan = Steps(progress)

    def one(operation: str, native_fn, devshim_fn) -> None:
        best: dict = {}
        for _ in range(rounds):
            for who, fn in (("native", native_fn), ("devshim", devshim_fn)):
                if fn is None:
                    continue
                m = measure(fn, warmup=1, min_run_time=min_run_time, device=target)
                if who not in best or m.median < best[who].median:
                    best[who] = m
        rows.append({"backend": name, "device": device_name(target, name), "operation": operation,
                     **_comparison(best.get("native"), best["devshim"])})

    for operation, native_fn, devshim_fn in cases:
        plan.add(f"{name} {operation}", lambda o=operation, n=native_fn, d=devshim_fn: one(o, n, d))
    plan.run()
    return rows


EXPERIMENT = Experiment(
    "overhead",
    summary="devshim's device_of, copy_if_needed and to_device against the native call, as ratios",
    run=run,
    options=[
        Option("--device", dest="device", metavar="D", help="the target device (default: try_gpu())"),
        Option("--rounds", dest="rounds", type=int, metavar="N",
               help="alternating native/devshim rounds; each side keeps its fastest (default 3)"),
    ],
    columns=[
        Column("backend", "backend"), Column("device", "device"), Column("operation", "operation"),
        Column("native_seconds", "native", form="seconds"), Column("devshim_seconds", "devshim", form="seconds"),
        Column("ratio", "devshim/native", form="ratio"),
    ],
    plot=BarPlot(label="operation", value="ratio", reference=1.0,
                 xlabel="devshim time / native time (1 = no overhead; IQR bars)"),
)


def _comparison(native, ours) -> dict:
    """The row fields comparing devshim's measurement with the native one (None: no native call)."""
    row: dict = {}
    for who, m in (("native", native), ("devshim", ours)):
        row[f"{who}_seconds"] = m.median if m else None
        row[f"{who}_iqr"] = m.iqr if m else None
    row["noisy"] = ours.noisy or bool(native and native.noisy)
    row["settled"] = ours.settled and bool(native is None or native.settled)
    row["busy"] = ours.busy or bool(native and native.busy)
    if native is None:
        row.update(ratio=None, ratio_low=None, ratio_high=None)
    else:
        (n1, n3), (d1, d3) = native.quartiles(), ours.quartiles()
        row.update(ratio=ours.median / native.median, ratio_low=d1 / n3, ratio_high=d3 / n1)
    return row

"""D2L exercise 4: matmuls on two devices at once vs in sequence on one."""

from __future__ import annotations

import concurrent.futures

import devshim as ds
from devshim.backends import get_backend
from devshim.bench.experiment import (
    BarPlot, Column, Experiment, Option, Steps, check_count, check_sizes, device_name, native_device,
    ops_for,
)
from devshim.bench.measure import measure, spread_fields
from devshim.errors import ExperimentError


def run(size: int = 512, repeats: int = 10, *, backend=None, devices=None, min_run_time: float = 0.3,
        progress=None) -> list:
    """Two streams of matmuls on two devices at once vs both in sequence on one device.

    Each stream is ``repeats`` ``size x size`` matmuls; "at once" runs the
    two streams from two threads. The devices are the first two GPUs (or
    virtual devices), or the two given. With one device only (no second GPU,
    or the same device given twice) both streams run on it, and the second
    row says so in its variant and note: it shows what concurrency buys on
    one device, not two. Rows: variant, devices, seconds with its spread, and
    speedup (sequential / this).

    Example:
        >>> seq, both = run()
        >>> both["speedup"]   # about 2 on two idle GPUs
    """
    size = int(check_sizes([size], "parallel size")[0])
    check_count(repeats, "repeats")
    adapter = get_backend(backend)
    name, ops = adapter.name, ops_for(adapter.name)
    first, second = _two_devices(adapter, devices)
    one_device = device_name(first, name) == device_name(second, name)
    inputs = [(ops.rand((size, size), d), ops.rand((size, size), d)) for d in (first, second)]
    on_first = [inputs[0], tuple(ds.to_device(x, first) for x in inputs[1])]

    def stream(a, b):
        out = None
        for _ in range(repeats):
            out = ops.matmul(a, b)
        return out

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)

    def sequential():
        return [stream(*pair) for pair in on_first]

    def at_once():
        futures = [pool.submit(stream, *pair) for pair in inputs]
        return [f.result() for f in futures]

    if one_device:
        both = f"{device_name(first, name)} twice"
        label = "at once on one device"
        note = "one device only: both streams share it"
    else:
        both = f"{device_name(first, name)} + {device_name(second, name)}"
        label, note = "at once on two devices", ""
    rows: list = []
    plan = Steps(progress)

    def one(variant: str, fn, where: str, row_note: str) -> None:
        m = measure(fn, warmup=1, min_run_time=min_run_time, label=variant)
        rows.append({"backend": name, "variant": variant, "devices": where, "size": size,
                     "repeats": repeats, **spread_fields(m), "note": row_note})

    plan.add(f"{name} sequential",
             lambda: one("in sequence on one device", sequential, device_name(first, name), ""))
    plan.add(f"{name} at once", lambda: one(label, at_once, both, note))
    try:
        plan.run()
    finally:
        pool.shutdown()
    for row in rows:
        row["speedup"] = rows[0]["seconds"] / row["seconds"]
    return rows


def _two_devices(adapter, devices) -> tuple:
    """(first, second) native devices for the streams: the two given, or the first two GPUs;
    the same device twice when there is one only."""
    if devices is not None:
        if not 1 <= len(devices) <= 2:
            raise ExperimentError(f"parallel runs on one or two devices, not {len(devices)}.")
        chosen = [native_device(d, adapter.name) for d in devices]
    else:
        gpus = adapter.devices()[1:]
        chosen = gpus[:2] if gpus else [adapter.cpu()]
    return chosen[0], chosen[-1]


EXPERIMENT = Experiment(
    "parallel",
    summary="D2L exercise 4: two matmul streams on two devices at once vs in sequence",
    run=run,
    options=[
        Option("--size", dest="size", type=int, metavar="N", help="matrix size n (default 512)"),
        Option("--repeats", dest="repeats", type=int, metavar="N", help="matmuls per stream (default 10)"),
        Option("--device", dest="devices", action="append", metavar="D",
               help="a device for the streams (give two; default: the first two GPUs)"),
    ],
    columns=[
        Column("backend", "backend"), Column("variant", "variant"), Column("devices", "devices"),
        Column("seconds", "time", form="seconds"), Column("speedup", "speedup", form="ratio"),
        Column("note", "note"),
    ],
    plot=BarPlot(label="variant", value="seconds", scale=1e3, xlabel="milliseconds (median, IQR bars)"),
)

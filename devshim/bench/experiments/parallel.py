"""D2L exercise 4: matmuls on two devices at once vs in sequence on one."""

from __future__ import annotations

import concurrent.futures

import devshim as ds
from devshim.bench.experiment import (
    BarPlot, Column, Experiment, Option, Steps, backend_ops, check_count, check_sizes, device_name, int_option,
    native_device, run_steps,
)
from devshim.bench.measure import measure_pair, side_fields
from devshim.bench.threads import THREADS_OPTION, on_threads
from devshim.errors import ExperimentError


@on_threads
def run(size: int = 512, repeats: int = 10, *, backend=None, devices=None, min_run_time: float = 0.3,
        progress=None) -> list:
    """Two streams of matmuls on two devices at once vs both in sequence on one device.

    Each stream is `repeats` `size x size` matmuls; "at once" runs the
    two streams from two threads. The devices are the first two GPUs (or
    virtual devices), or the two given. With one device only (no second GPU,
    or the same device given twice) both streams run on it, and the second
    row says so in its variant and note: it shows what concurrency buys on
    one device, not two. The two variants are measured side by side (their
    runs take turns: `devshim.timing.compare`). Rows: variant, devices,
    seconds with its spread, and speedup (sequential / this: the median of the
    per-pair ratios, with speedup_low/high their quartiles). `threads` sets
    the framework's CPU threads (default 1: `devshim.bench.threads`).

    Example:
        >>> seq, both = run()
        >>> both["speedup"]   # about 2 on two idle GPUs
    """
    size = int(check_sizes([size], "parallel size")[0])
    check_count(repeats, "repeats")
    adapter, name, ops = backend_ops(backend)
    first, second = _two_devices(adapter, devices)
    first_name, second_name = device_name(first, name), device_name(second, name)
    inputs = [(ops.rand((size, size), d), ops.rand((size, size), d)) for d in (first, second)]
    on_first = [inputs[0], tuple(ds.to_device(x, first) for x in inputs[1])]

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)

    def sequential():
        return [run_steps(repeats, ops.matmul, *pair) for pair in on_first]

    def at_once():
        futures = [pool.submit(run_steps, repeats, ops.matmul, *pair) for pair in inputs]
        return [f.result() for f in futures]

    if first_name == second_name:
        both_devices, label = f"{first_name} twice", "at once on one device"
        note = "one device only: both streams share it"
    else:
        both_devices, label, note = f"{first_name} + {second_name}", "at once on two devices", ""
    plan = Steps(progress)

    def both() -> list:
        c = measure_pair(at_once, sequential, warmup=1, min_run_time=min_run_time,
                         labels=("at once", "in sequence"))
        common = {"backend": name, "size": size, "repeats": repeats}
        return [{**common, "variant": "in sequence on one device", "devices": first_name, "note": "",
                 **side_fields(c, c.second, "speedup", compared=False)},
                {**common, "variant": label, "devices": both_devices, "note": note,
                 **side_fields(c, c.first, "speedup")}]

    plan.add(f"{name} in sequence vs at once", both)
    try:
        return plan.run()
    finally:
        pool.shutdown()


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
        int_option("--size", "matrix size n (default 512)"),
        int_option("--repeats", "matmuls per stream (default 10)"),
        Option("--device", dest="devices", action="append", metavar="D",
               help="a device for the streams (give two; default: the first two GPUs)"),
        THREADS_OPTION,
    ],
    columns=[
        Column("backend", "backend"), Column("variant", "variant"), Column("devices", "devices"),
        Column("seconds", "time", form="seconds"), Column("speedup", "speedup", form="ratio"),
        Column("threads", "threads", form="number"), Column("note", "note"),
    ],
    plot=BarPlot(label="variant", value="seconds", scale=1e3, xlabel="milliseconds (median, IQR bars)"),
)

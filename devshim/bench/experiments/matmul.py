"""D2L exercise 1: large and small matmuls on the CPU and on each GPU."""

from __future__ import annotations

from devshim.bench.experiment import (
    Column, Experiment, LinePlot, Option, Steps, backend_ops, check_sizes, device_name, native_device,
)
from devshim.bench.measure import measure, measure_pair, rate_fields, side_fields, spread_fields
from devshim.bench.threads import THREADS_OPTION, on_threads


@on_threads
def run(sizes=(16, 64, 256, 1024), *, backend=None, devices=None, min_run_time: float = 0.2,
        progress=None) -> list:
    """Time `n x n` float32 matmuls on the CPU and each GPU.

    Rows: backend, device, size, seconds (median per matmul) with its spread,
    gflops (with gflops_low/high from the quartiles), and cpu_over_device
    (CPU seconds / this device's seconds: above 1, the device is faster). Each
    device's matmul is measured side by side with the CPU's (their runs take
    turns: `devshim.timing.compare`), so cpu_over_device is the median of the
    per-pair ratios, with cpu_over_device_low/high their quartiles.
    `devices` limits the accelerators; the CPU is always measured, as the
    reference, on `threads` threads (default 1: `devshim.bench.threads`).

    Example:
        >>> for row in run([64, 1024]):
        ...     print(row["device"], row["size"], row["gflops"])
    """
    sizes = [int(n) for n in check_sizes(sizes, "matmul sizes")]
    adapter, name, ops = backend_ops(backend)
    cpu = adapter.cpu()
    chosen = adapter.devices()[1:] if devices is None else [native_device(d, name) for d in devices]
    targets = [cpu] + [d for d in chosen if adapter.describe(d) != adapter.describe(cpu)]
    steps = Steps(progress)

    def one(device, n: int) -> dict:
        a, b = ops.rand((n, n), device), ops.rand((n, n), device)
        if device is cpu:
            m = measure(ops.matmul, a, b, warmup=1, min_run_time=min_run_time, device=device)
            fields = {**spread_fields(m), "cpu_over_device": 1.0}
        else:
            x, y = ops.rand((n, n), cpu), ops.rand((n, n), cpu)
            c = measure_pair(lambda: ops.matmul(a, b), lambda: ops.matmul(x, y), warmup=1,
                             min_run_time=min_run_time, labels=("device", "cpu"))
            m, fields = c.first, side_fields(c, c.first, "cpu_over_device")
        return {"backend": name, "device": device_name(device, name), "size": n, **fields,
                **rate_fields(m, 2 * n**3, "gflops")}

    for device in targets:
        for n in sizes:
            steps.add(f"{name} {device_name(device, name)} {n}x{n}", one, device, n)
    return steps.run()


EXPERIMENT = Experiment(
    "matmul",
    summary="D2L exercise 1: square float32 matmuls by size, on the CPU and each GPU",
    run=run,
    options=[
        Option("--sizes", dest="sizes", type=int, nargs="+", metavar="N",
               help="matrix sizes n (n x n); default 16 64 256 1024"),
        Option("--device", dest="devices", action="append", metavar="D",
               help="an accelerator to measure (repeatable); the CPU is always measured, as the reference"),
        THREADS_OPTION,
    ],
    columns=[
        Column("backend", "backend"), Column("device", "device"), Column("size", "n", form="number"),
        Column("seconds", "time", form="seconds"), Column("gflops", "GFLOP/s", form="number"),
        Column("cpu_over_device", "CPU/device", form="ratio"), Column("threads", "threads", form="number"),
    ],
    plot=LinePlot(x="size", y="gflops", group=("backend", "device"),
                  xlabel="matrix size n (n x n, float32)", ylabel="GFLOP/s (median, IQR bars)"),
)

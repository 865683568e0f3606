"""D2L exercise 3: log a norm to the host every step, or keep the log on the device."""

from __future__ import annotations

from devshim.bench.experiment import (
    BarPlot, Column, Experiment, HostReads, Option, Steps, backend_ops, check_count, check_sizes, device_name,
    int_option, native_device,
)
from devshim.bench.measure import measure_pair, side_fields
from devshim.bench.threads import THREADS_OPTION, on_threads
from devshim.errors import ExperimentError

VARIANTS = ("log to host each step", "log on device, move once")


@on_threads
def run(steps: int = 1000, size: int = 100, *, backend=None, device=None, min_run_time: float = 0.3,
        progress=None) -> list:
    """Log a matmul's Frobenius norm to the host every step vs keep the log on
    the device and move it once.

    The two variants are measured side by side (their runs take turns:
    `devshim.timing.compare`). Rows, one per variant: seconds (median for all
    `steps`) with its spread, host_reads (`steps` vs 1, counted through
    `HostReads`), and slowdown (this variant's time over the on-device variant's,
    the median of the per-pair ratios, with slowdown_low/high their quartiles).
    Both variants must log the same values. `threads` sets the framework's CPU
    threads (default 1: `devshim.bench.threads`).

    Example:
        >>> slow, fast = run(steps=1000)
        >>> slow["host_reads"], fast["host_reads"], slow["slowdown"]
        (1000, 1, 3.2)
    """
    check_count(steps, "steps")
    size = int(check_sizes([size], "logging size")[0])
    adapter, name, ops = backend_ops(backend)
    target = adapter.try_gpu() if device is None else native_device(device, name)
    a, b = ops.rand((size, size), target), ops.rand((size, size), target)

    def to_host_each_step(reads: HostReads) -> list:
        return [float(reads.read(ops.norm(ops.matmul(a, b)))) for _ in range(steps)]

    def on_device_move_once(reads: HostReads) -> list:
        log = [ops.norm(ops.matmul(a, b)) for _ in range(steps)]
        return [float(v) for v in reads.read(ops.stack(log)).ravel()]

    variants = dict(zip(VARIANTS, (to_host_each_step, on_device_move_once)))
    logs: dict = {}
    counts: dict = {}
    plan = Steps(progress)

    def both() -> list:
        for label, variant in variants.items():
            counted = HostReads()
            logs[label] = variant(counted)
            counts[label] = counted.count
        c = measure_pair(lambda: on_device_move_once(HostReads()), lambda: to_host_each_step(HostReads()), warmup=1,
                         min_run_time=min_run_time, device=target, labels=VARIANTS[::-1])
        return [{"backend": name, "device": device_name(target, name), "variant": label, "steps": steps,
                 "size": size, "host_reads": counts[label], **side_fields(c, m, "slowdown", compared)}
                for label, m, compared in ((VARIANTS[0], c.second, True), (VARIANTS[1], c.first, False))]

    plan.add(f"{name} {' vs '.join(VARIANTS)}", both)
    rows = plan.run()
    first, second = (logs[label] for label in VARIANTS)
    if len(first) != len(second) or any(abs(x - y) > 1e-3 * max(1.0, abs(x)) for x, y in zip(first, second)):
        raise ExperimentError(
            f"The two logging variants logged different norms on {name}; the experiment is broken. "
            f"Please report it with the output of `devshim info`."
        )
    return rows


def _reads(row) -> str:
    return f"{row['host_reads']} host read{'s' if row['host_reads'] != 1 else ''}"


EXPERIMENT = Experiment(
    "logging",
    summary="D2L exercise 3: log a norm to the host each step vs keep the log on the device",
    run=run,
    options=[
        int_option("--steps", "steps to log (default 1000)"),
        int_option("--size", "matrix size n of each step's matmul (default 100)"),
        Option("--device", dest="device", metavar="D", help="where to compute (default: try_gpu())"),
        THREADS_OPTION,
    ],
    columns=[
        Column("backend", "backend"), Column("device", "device"), Column("variant", "variant"),
        Column("steps", "steps", form="number"), Column("seconds", "time", form="seconds"),
        Column("host_reads", "host reads", form="number"), Column("slowdown", "slowdown", form="ratio"),
        Column("threads", "threads", form="number"),
    ],
    plot=BarPlot(label="variant", value="seconds", scale=1e3, xlabel="milliseconds (median, IQR bars)",
                 annotate=_reads),
)

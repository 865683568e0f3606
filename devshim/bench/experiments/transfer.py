""""Copying is slow": host-to-device and device-to-host bandwidth."""

from __future__ import annotations

import devshim as ds
from devshim.backends import virtual_capable_backends
from devshim.bench.experiment import (
    Column, Experiment, LinePlot, Option, Steps, backend_ops, check_sizes, device_name, native_device,
)
from devshim.bench.measure import measure, rate_fields, spread_fields
from devshim.bench.threads import THREADS_OPTION, on_threads

def no_device_line(backend: str) -> str:
    """The line that stands for the rows left out when `backend`'s device end is the host itself.

    Example:
        >>> no_device_line("numpy")[:44]
        'numpy: no device but the host (no GPU, real'
    """
    how = ("run on a machine with a GPU, or set DEVSHIM_VIRTUAL_DEVICES=1 to time devshim's code path "
           "to a virtual GPU (a host copy as well)" if backend in virtual_capable_backends()
           else f"{backend} keeps its arrays on the host")
    return (f"{backend}: no device but the host (no GPU, real or virtual, or the CPU was asked for): its "
            "host->device and device->host rows are left out, since a copy from the host to itself "
            f"measures the host's memory, not a transfer; {how}.")


@on_threads
def run(sizes_mb=(1, 8, 64), *, backend=None, device=None, min_run_time: float = 0.2,
        progress=None) -> list:
    """Host-to-device (`ds.to_device`) and device-to-host (`ds.to_numpy`)
    bandwidth for float32 buffers of `sizes_mb` MiB.

    `device` defaults to the first GPU. Where the device end is the host CPU
    itself (no GPU, real or virtual, or `device="cpu"`) there is no transfer
    to time: the one row returned is `{"backend": ..., "omitted": no_device_line(backend)}`,
    which the table prints as a line. Rows: direction, device, megabytes,
    seconds (median per copy) with its spread, gb_per_s (with gb_per_s_low/high
    from the quartiles), and threads where a virtual GPU copies on the host
    (default 1: `devshim.bench.threads`).

    Example:
        >>> for row in run([1, 64]):
        ...     print(row["direction"], row["megabytes"], row["gb_per_s"])
    """
    sizes_mb = check_sizes(sizes_mb, "transfer sizes (MiB)")
    adapter, name, ops = backend_ops(backend)
    target = adapter.try_gpu() if device is None else native_device(device, name)
    where = device_name(target, name)
    if adapter.describe(target).kind == "cpu":
        return [{"backend": name, "omitted": no_device_line(name)}]
    plan = Steps(progress)

    def one(mb: float) -> list:
        count = max(1, int(mb * 2**20) // 4)
        nbytes = count * 4
        host = ops.rand((count,), adapter.cpu())
        placed = ds.to_device(host, target)
        rows = []
        for direction, fn, arg in (("host->device", lambda x: ds.to_device(x, target), host),
                                   ("device->host", ds.to_numpy, placed)):
            m = measure(fn, arg, warmup=1, min_run_time=min_run_time, device=target, label=direction)
            rows.append({"backend": name, "direction": direction, "device": where, "megabytes": nbytes / 2**20,
                         **spread_fields(m), **rate_fields(m, nbytes, "gb_per_s")})
        return rows

    for mb in sizes_mb:
        plan.add(f"{name} {where} {mb:g} MiB", one, mb)
    return plan.run()


EXPERIMENT = Experiment(
    "transfer",
    summary='"copying is slow": host-to-device and device-to-host GB/s by buffer size',
    run=run,
    options=[
        Option("--sizes", dest="sizes_mb", type=float, nargs="+", metavar="MIB",
               help="buffer sizes in MiB (default 1 8 64)"),
        Option("--device", dest="device", metavar="D", help="the device end (default: try_gpu())"),
        THREADS_OPTION,
    ],
    columns=[
        Column("backend", "backend"), Column("direction", "direction"), Column("device", "device"),
        Column("megabytes", "MiB", form="number"), Column("seconds", "time", form="seconds"),
        Column("gb_per_s", "GB/s", form="number"), Column("threads", "threads", form="number"),
    ],
    plot=LinePlot(x="megabytes", y="gb_per_s", group=("backend", "device", "direction"),
                  xlabel="buffer size (MiB)", ylabel="GB/s (median, IQR bars)"),
)

"""`ds.convert` between frameworks: zero-copy on one device, explicit copies across devices."""

from __future__ import annotations

import devshim as ds
from devshim.backends import available_backends, get_backend, specs
from devshim.bench.experiment import BarPlot, Column, Experiment, Option, Steps, check_sizes, device_name, ops_for
from devshim.bench.measure import measure, measure_pair, side_fields, spread_fields
from devshim.conversion import interop_for, target_backend
from devshim.errors import DevshimError, ExperimentError

SIZES = (64, 64 * 2**20)  # bytes: 64 B and 64 MiB


def run(to=None, *, backend=None, min_run_time: float = 0.2, progress=None, sizes=None) -> list:
    """`ds.convert` from the selected backend's tensors to `to`'s (default: the first other
    installed framework that ds.convert knows), float32 buffers of `sizes` bytes.

    Rows, case "same device": `ds.convert(x, to)` on the host for 64 B and 64 MiB, with
    `vs_smallest` (this size's time over the smallest size's: about 1 for zero-copy). Case
    "cross device" (when the target has a GPU, virtual ones included): `ds.convert(x, to,
    device=gpu)` for each size against `native`, the same two framework calls made directly
    (the source's copy to a NumPy array, then the target's put on the GPU), measured side by side
    (their runs take turns: `devshim.timing.compare`), with `vs_native` the median of the
    per-pair ratios (`vs_native_low`/`_high`: their quartiles). Each framework keeps its own
    CPU threads here (two frameworks: `--threads` would set only one of them).

    Example:
        >>> for row in run("jax", backend="torch"):
        ...     print(row["case"], row["bytes"], row["seconds"], row.get("vs_smallest"))
    """
    source = get_backend(backend)
    target = target_backend(to) if to is not None else _default_target(source)
    if target is None:
        return [{"backend": source.name, "to": "-", "case": "-",
                 "note": "no second framework with interop.py is installed: nothing to convert to"}]
    if target is source:
        raise ExperimentError(f"--to names the source framework ({source.name}); name another one.")
    sizes = check_sizes(sizes or SIZES, "convert sizes (bytes)")
    ops, plan = ops_for(source.name), Steps(progress)
    host = source.cpu()
    try:
        gpu = target.try_gpu()
    except DevshimError:  # NumPy under DEVSHIM_VIRTUAL_DEVICES: it has no GPUs to present
        gpu = target.cpu()
    crossing = target.describe(gpu).kind != "cpu"
    inputs = {n: ops.rand((max(1, n // 4),), host) for n in sizes}
    get_to_host, put = source.tensor_to_numpy, interop_for(target).from_host

    def same(n: int) -> dict:
        m = measure(ds.convert, inputs[n], target.name, warmup=2, min_run_time=min_run_time,
                    label=f"convert {n} B")
        return {"backend": source.name, "to": target.name, "case": "same device",
                "device": device_name(host, source.name), "bytes": n, **spread_fields(m)}

    def across(n: int) -> dict:
        x = inputs[n]
        c = measure_pair(lambda: put(target, get_to_host(x), gpu), lambda: ds.convert(x, target.name, device=gpu),
                         warmup=1, min_run_time=min_run_time, device=gpu,
                         labels=(f"native {n} B to {gpu}", f"convert {n} B to {gpu}"))
        fields = side_fields(c, c.second, "vs_native")
        fields["noisy"] = fields["noisy"] or c.first.noisy  # either side's runs disagreeing
        return {"backend": source.name, "to": target.name, "case": "cross device",
                "device": device_name(gpu, target.name), "bytes": n, **fields,
                "native_seconds": c.first.median, "native_iqr": c.first.iqr}

    for n in sizes:
        plan.add(f"{source.name}->{target.name} {n} B same device", same, n)
    if crossing:
        for n in sizes:
            plan.add(f"{source.name}->{target.name} {n} B to {gpu}", across, n)
    rows = plan.run()
    smallest = next((r["seconds"] for r in rows if r["case"] == "same device" and r["bytes"] == min(sizes)), None)
    for row in rows:
        if row["case"] == "same device" and smallest:
            row["vs_smallest"] = row["seconds"] / smallest
        row["label"] = f"{row['backend']}->{row['to']} {row['case']} {row['bytes']} B"
    return rows


def _default_target(source):
    return next((get_backend(name) for name in available_backends()
                 if name not in (source.name, "cupy") and specs()[name].has_module("interop")), None)


EXPERIMENT = Experiment(
    "convert",
    summary="ds.convert between frameworks: 64 B vs 64 MiB on one device (zero-copy), "
            "and across devices vs the native calls",
    run=run,
    options=[
        Option("--to", dest="to", metavar="FRAMEWORK", help="the target framework (default: another installed one)"),
        Option("--sizes", dest="sizes", type=int, nargs="+", metavar="BYTES",
               help="buffer sizes in bytes (default 64 and 67108864, 64 MiB)"),
    ],
    columns=[
        Column("backend", "from"), Column("to", "to"), Column("case", "case"), Column("device", "device"),
        Column("bytes", "bytes", form="number"), Column("seconds", "time", form="seconds"),
        Column("vs_smallest", "vs 64 B", form="number"), Column("native_seconds", "native", form="seconds"),
        Column("vs_native", "vs native", form="number"),
    ],
    plot=BarPlot(label="label", value="seconds", scale=1e6, xlabel="microseconds (median)"),
)

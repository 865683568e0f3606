"""devshim's own cost, against the framework's native call, as ratios measured side by side."""

from __future__ import annotations

import devshim as ds
from devshim.bench.experiment import BarPlot, Column, Experiment, Option, Steps, backend_ops, device_name, native_device
from devshim.bench.measure import measure, measure_pair, pair_fields, spread_fields
from devshim.bench.threads import THREADS_OPTION, on_threads

NEST_LEAVES = 1000


@on_threads
def run(*, backend=None, device=None, min_run_time: float = 0.05, progress=None) -> list:
    """devshim's `device_of`, `copy_if_needed` and `to_device` against the native call.

    Cases: `device_of`; `copy_if_needed` when nothing has to be copied;
    `to_device` of a small (64 B) and a 1 MiB tensor; `to_device` of a
    nest of 8 small tensors, and of a dict of 1000 small tensors against a
    dict comprehension of native copies. Each native side is the expression a
    user writes (`t.device`, `t.to(dev)`, `np.asarray(a)`) inline in the
    timed callable, from the backend's `ops.native_calls`. The two sides are
    measured side by side (`devshim.timing.compare`: their blocks of calls take
    turns, so both see the same machine), and the ratio is the median of the
    per-pair ratios. Rows: operation, native_seconds and devshim_seconds (each
    with its IQR), ratio (devshim / native; None when the framework has no native
    equivalent) with ratio_low/high (the quartiles of the per-pair ratios), and
    the flags (noisy, stalled, settled) of the comparison. `threads` sets the
    framework's CPU threads (default 1: `devshim.bench.threads`).

    Example:
        >>> for row in run():
        ...     print(row["operation"], f"{row['ratio']:.2f}x")
    """
    adapter, name, ops = backend_ops(backend)
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
    plan = Steps(progress)

    def one(operation: str, native_fn, devshim_fn) -> dict:
        where = {"backend": name, "device": device_name(target, name), "operation": operation}
        if native_fn is None:
            m = measure(devshim_fn, warmup=1, min_run_time=min_run_time, device=target)
            return {**where, "native_seconds": None, "native_iqr": None, **spread_fields(m, "devshim_seconds"),
                    "ratio": None, "ratio_low": None, "ratio_high": None}
        c = measure_pair(native_fn, devshim_fn, warmup=1, min_run_time=min_run_time, device=target,
                         labels=("native", "devshim"))
        return {**where, **pair_fields(c, "native", "devshim")}

    for operation, native_fn, devshim_fn in cases:
        plan.add(f"{name} {operation}", one, operation, native_fn, devshim_fn)
    return plan.run()


EXPERIMENT = Experiment(
    "overhead",
    summary="devshim's device_of, copy_if_needed and to_device against the native call, as ratios",
    run=run,
    options=[
        Option("--device", dest="device", metavar="D", help="the target device (default: try_gpu())"),
        THREADS_OPTION,
    ],
    columns=[
        Column("backend", "backend"), Column("device", "device"), Column("operation", "operation"),
        Column("native_seconds", "native", form="seconds"), Column("devshim_seconds", "devshim", form="seconds"),
        Column("ratio", "devshim/native", form="ratio"), Column("threads", "threads", form="number"),
    ],
    plot=BarPlot(label="operation", value="ratio", reference=1.0,
                 xlabel="devshim time / native time (1: no overhead; bars: quartiles over the pairs)"),
)


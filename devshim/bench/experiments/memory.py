"""What a tensor, a model and a training step cost in memory, per framework and device."""

from __future__ import annotations

import devshim as ds
from devshim.backends import get_backend
from devshim.bench.experiment import BarPlot, Column, Experiment, Option, Steps, check_count, device_name, ops_for

MiB = 2**20
#: The small model's hidden width and outputs (`ops.small_model(width, OUTPUTS)`: width -> 8 -> 10).
HIDDEN, OUTPUTS = 8, 10


def model_bytes(width: int) -> int:
    """The hand count of `ops.small_model(width, 10)`'s float32 parameters: two weights, two biases.

    Example:
        >>> model_bytes(4096)
        131432
    """
    return 4 * (width * HIDDEN + HIDDEN + HIDDEN * OUTPUTS + OUTPUTS)


def run(megabytes: int = 16, width: int = 65536, batch: int = 64, *, backend=None, device=None,
        min_run_time: float = 0.0, progress=None) -> list:
    """On the CPU and each GPU of the backend (or on `device`): the memory a float32 tensor of
    `megabytes` MiB takes, the memory `ops.small_model(width, 10)` takes once placed there
    (an MLP width -> 8 -> 10), and the most one SGD training step of it on a batch of `batch`
    examples takes (`ops.train_step`: forward, backward, update), each against the hand count
    of its bytes where there is one (the tensor's and the parameters').

    Figures come from `ds.memory` (what is in use after, less before) and `ds.memory_peak`
    (the most in use inside, less before). On the host they are the process's resident memory,
    which a freed and reused buffer need not grow; a framework that says nothing of a device's
    use gives "-". Rows: backend, device, case, expected_bytes (the hand count, or None),
    in_use_bytes, peak_bytes, method (how the peak was taken), and the same in MiB for the table.
    `min_run_time` is accepted for the command line's sake: nothing here is timed.

    Example:
        >>> rows = run(backend="torch")                  # DEVSHIM_VIRTUAL_DEVICES=1
        >>> [(r["device"], r["case"], r["peak_mib"]) for r in rows][:2]
        [('cpu:0', 'tensor 16 MiB', 16.0), ('cpu:0', 'model (width 65536)', 2.0)]
    """
    check_count(megabytes, "megabytes")
    check_count(width, "width")
    check_count(batch, "batch")
    adapter = get_backend(backend)
    ops = ops_for(adapter.name)
    natives = adapter.devices() if device is None else [adapter.device(device)]
    rows: list = []
    plan = Steps(progress)
    for native in natives:
        plan.add(f"{adapter.name} {device_name(native, adapter.name)}",
                 lambda native=native: rows.extend(_on(adapter, ops, native, megabytes, width, batch)))
    plan.run()
    return rows


def _row(adapter, native, case: str, expected, before, peak) -> dict:
    after = ds.memory(native).in_use
    added = None if after is None or before is None else after - before
    row = {"backend": adapter.name, "device": device_name(native, adapter.name), "case": case,
           "expected_bytes": expected, "in_use_bytes": added, "peak_bytes": peak.added, "method": peak.method}
    for key in ("expected", "in_use", "peak"):
        value = row[f"{key}_bytes"]
        row[f"{key}_mib"] = None if value is None else round(value / MiB, 3)
    row["label"] = f"{row['device']} {case}"
    row["note"] = ("the process's resident memory: a freed buffer reused need not grow it" if
                   ds.memory(native).device.kind == "cpu" else "ds.memory: " + ds.memory(native).source)
    return row


def _measure(native, work):
    """(bytes in use before, the MemoryPeak of `work()`, what `work` returned)."""
    before = ds.memory(native).in_use
    with ds.memory_peak(native) as peak:
        result = work()
        ds.synchronize(native)
    return before, peak, result


def _on(adapter, ops, native, megabytes: int, width: int, batch: int) -> list:
    rows = []
    before, peak, kept = _measure(native, lambda: ops.rand((megabytes * MiB // 4096, 1024), native))
    rows.append(_row(adapter, native, f"tensor {megabytes} MiB", megabytes * MiB, before, peak))
    del kept
    if not hasattr(ops, "small_model"):
        return rows
    model = ops.small_model(width, OUTPUTS)
    before, peak, model = _measure(native, lambda: ds.place_model(model, native))
    rows.append(_row(adapter, native, f"model (width {width})", model_bytes(width), before, peak))
    if hasattr(ops, "train_step"):
        x, y = ops.rand((batch, width), native), ops.rand((batch, OUTPUTS), native)
        _, model = ops.train_step(model, x, y)  # the first step makes what every step keeps (gradients)
        before, peak, _ = _measure(native, lambda: ops.train_step(model, x, y))
        rows.append(_row(adapter, native, f"training step (batch {batch})", None, before, peak))
    return rows


EXPERIMENT = Experiment(
    "memory",
    summary="what a tensor, a model and a training step take in memory on each device (ds.memory, ds.memory_peak)",
    run=run,
    options=[
        Option("--megabytes", dest="megabytes", type=int, metavar="N", help="the tensor's size in MiB (default 16)"),
        Option("--width", dest="width", type=int, metavar="N",
               help="the model's inputs: an MLP N -> 8 -> 10 (default 65536: 2 MiB of parameters)"),
        Option("--batch", dest="batch", type=int, metavar="N", help="examples in the training step's batch (default 64)"),
        Option("--device", dest="device", metavar="D", help="one device only (default: the CPU and each GPU)"),
    ],
    columns=[
        Column("backend", "backend"), Column("device", "device"), Column("case", "case"),
        Column("expected_mib", "hand count MiB", form="number"), Column("in_use_mib", "kept MiB", form="number"),
        Column("peak_mib", "peak MiB", form="number"), Column("method", "peak taken by"),
    ],
    plot=BarPlot(label="label", value="peak_mib", xlabel="MiB at most above what was in use before"),
)

"""What a tensor, a model and a training step cost in memory, per framework and device; what
an estimate without the memory says of the same step; and the largest batch that fits a GPU of
a given size, planned on this machine (`ds.largest_batch`)."""

from __future__ import annotations

import time

import devshim as ds
from devshim.bench.experiment import (
    BarPlot, Column, Experiment, Option, Steps, backend_ops, check_count, device_name, int_option,
)
from devshim.errors import MemoryEstimateError, MemoryEstimateUnsupportedError

MiB = 2**20
#: The small model's hidden width and outputs (`ops.small_model(width, OUTPUTS)`: width -> 8 -> 10).
HIDDEN, OUTPUTS = 8, 10
#: The planning case: a GPU of this size, and the width of the model planned for it (its batch
#: alone takes 4 MiB an example, so a step needs about 40 GB at a batch of 9,500).
PLAN_SIZE, PLAN_WIDTH = "80GB", 2**20


def model_bytes(width: int) -> int:
    """The hand count of `ops.small_model(width, 10)`'s float32 parameters: two weights, two biases.

    Example:
        >>> model_bytes(4096)
        131432
    """
    return 4 * (width * HIDDEN + HIDDEN + HIDDEN * OUTPUTS + OUTPUTS)


def run(megabytes: int = 16, width: int = 65536, batch: int = 64, *, backend=None, device=None,
        plan_size: str = PLAN_SIZE, plan_width: int = PLAN_WIDTH, min_run_time: float = 0.0, progress=None) -> list:
    """On the CPU and each GPU of the backend (or on `device`): the memory a float32 tensor of
    `megabytes` MiB takes, the memory `ops.small_model(width, 10)` takes once placed there
    (an MLP width -> 8 -> 10), and the most one SGD training step of it on a batch of `batch`
    examples takes (`ops.train_step`: forward, backward, update), each against the hand count
    of its bytes where there is one (the tensor's and the parameters'), and the training step
    against `ds.estimate_memory`'s figure for it. Then, where the framework can estimate, the
    largest batch of `ops.small_model(plan_width, 10)`'s training step that fits a GPU of
    `plan_size` (`ds.largest_batch`), with the seconds the search took and the host memory it used.

    Figures come from `ds.memory` (what is in use after, less before) and `ds.memory_peak`
    (the most in use inside, less before). On the host they are the process's resident memory,
    which a freed and reused buffer need not grow; a framework that says nothing of a device's
    use gives "-". `min_run_time` is accepted for the command line's sake: nothing here is timed.

    Example:
        >>> rows = run(backend="torch")                  # DEVSHIM_VIRTUAL_DEVICES=1
        >>> [(r["device"], r["case"], r["peak_mib"]) for r in rows][:2]
        [('cpu:0', 'tensor 16 MiB', 16.0), ('cpu:0', 'model (width 65536)', 2.0)]
    """
    for value, what in ((megabytes, "megabytes"), (width, "width"), (batch, "batch"), (plan_width, "plan width")):
        check_count(value, what)
    adapter, _, ops = backend_ops(backend)
    natives = adapter.devices() if device is None else [adapter.device(device)]
    plan = Steps(progress)
    for native in natives:
        plan.add(f"{adapter.name} {device_name(native, adapter.name)}", _on, adapter, ops, native, megabytes,
                 width, batch)
    plan.add(f"{adapter.name} largest batch for {plan_size}", _largest_batch, adapter, ops, plan_size, plan_width)
    return plan.run()


def _row(adapter, native, case: str, expected, before, peak, estimated=None) -> dict:
    after = ds.memory(native).in_use
    added = None if after is None or before is None else after - before
    row = {"backend": adapter.name, "device": device_name(native, adapter.name), "case": case,
           "expected_bytes": expected, "in_use_bytes": added, "peak_bytes": peak.added, "method": peak.method,
           "estimate_bytes": estimated}
    for key in ("expected", "in_use", "peak", "estimate"):
        value = row[f"{key}_bytes"]
        row[f"{key}_mib"] = None if value is None else round(value / MiB, 3)
    row["label"] = f"{row['device']} {case}"
    on_host = "the process's resident memory: a freed buffer reused need not grow it"
    row["note"] = peak.reason or (on_host if ds.memory(native).device.kind == "cpu"
                                  else "ds.memory: " + ds.memory(native).source)
    return row


def _measure(native, work):
    """(bytes in use before, the MemoryPeak of `work()`, what `work` returned)."""
    before = ds.memory(native).in_use
    with ds.memory_peak(native) as peak:
        result = work()
        ds.synchronize(native)
    return before, peak, result


def _on(adapter, ops, native, megabytes: int, width: int, batch: int) -> list:
    before, peak, kept = _measure(native, lambda: ops.rand((megabytes * MiB // 4096, 1024), native))
    rows = [_row(adapter, native, f"tensor {megabytes} MiB", megabytes * MiB, before, peak)]
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
        estimated = _step_estimate(adapter, ops, width, batch)
        rows.append(_row(adapter, native, f"training step (batch {batch})", None, before, peak, estimated))
    return rows


def _step_estimate(adapter, ops, width: int, batch: int):
    """What `ds.estimate_memory` says the second training step adds: the peak of two steps less
    what one step leaves (the model, its batch and, where they stay, its gradients). Made on the
    host device, with a model and batch of the same shapes; None where the framework cannot."""
    host = adapter.cpu()
    model, x, y = ops.small_model(width, OUTPUTS), ops.rand((batch, width), host), ops.rand((batch, OUTPUTS), host)

    def once(m, x, y):
        return ops.train_step(m, x, y)

    def twice(m, x, y):
        return ops.train_step(ops.train_step(m, x, y)[1], x, y)

    try:
        one = ds.estimate_memory(once, model, x, y, backend=adapter.name)
        two = ds.estimate_memory(twice, model, x, y, backend=adapter.name)
    except (MemoryEstimateUnsupportedError, MemoryEstimateError):
        return None
    return two.peak - one.kept


def _largest_batch(adapter, ops, size: str, width: int) -> list:
    """The planning row: the largest batch of the training step of `ops.small_model(width, 10)`
    that fits a GPU of `size`, found by estimates alone; the seconds it took, the host's peak
    memory above what it held before (`ds.memory_peak` on the host)."""
    if not hasattr(ops, "train_step"):
        return []
    host = adapter.cpu()
    model = ops.small_model(width, OUTPUTS)  # on the host: the estimate takes it as an argument, without a copy

    step, inputs = _planned_step(ops, model, width, host)
    began = time.perf_counter()
    try:
        with ds.memory_peak(host) as used:
            found = ds.largest_batch(step, size, inputs=inputs, backend=adapter.name, progress=False)
    except MemoryEstimateUnsupportedError as error:
        return [{"backend": adapter.name, "device": "-", "case": f"largest batch for {size}",
                 "note": str(error).split(":")[0]}]
    seconds = time.perf_counter() - began
    estimate = found.estimate
    return [{"backend": adapter.name, "device": f"planned ({estimate.device if estimate else '-'})",
             "case": f"largest batch for {size} (width {width}): {found.batch}",
             "estimate_bytes": None if estimate is None else estimate.peak,
             "estimate_mib": None if estimate is None else round(estimate.peak / MiB, 3),
             "seconds": round(seconds, 2), "host_mib": None if used.added is None else round(used.added / MiB, 1),
             "method": f"{len(found.tried)} estimates", "label": f"{adapter.name} largest batch for {size}",
             "note": f"{len(found.tried)} estimates by bisection; the host's peak rose {used.added} bytes"}]


def _planned_step(ops, model, width: int, host) -> tuple:
    """(step, inputs) for `ds.largest_batch`: the batch given as shapes alone where the framework's
    estimate takes them (`ops.shaped`), else drawn inside the step on the host."""
    shaped = getattr(ops, "shaped", None)
    if shaped is not None:
        return ops.train_step, lambda batch: (model, shaped((batch, width)), shaped((batch, OUTPUTS)))

    def step(model, batch: int):
        return ops.train_step(model, ops.rand((batch, width), host), ops.rand((batch, OUTPUTS), host))

    return step, lambda batch: (model, batch)


FOOTNOTE = (
    "hand count MiB: the bytes of the tensor, or of the model's parameters, counted by hand. kept MiB: what "
    "ds.memory says stayed in use after (less before). peak MiB: the most ds.memory_peak saw in use inside, "
    "less before; \"peak taken by\" says how (reset, counter: exact; sampled: at most the truth). estimate MiB: "
    "ds.estimate_memory's figure for the same step, found without the memory (the second step's peak less what "
    "the first left); for the largest-batch row, the estimated peak of the batch found, which \"case\" names. "
    "seconds and host MiB: how long that search took and how far the host's peak memory rose meanwhile. On the "
    "CPU every figure is the process's resident memory, which a freed buffer reused need not grow."
)

EXPERIMENT = Experiment(
    "memory",
    summary="what a tensor, a model and a training step take in memory on each device (ds.memory, ds.memory_peak), "
            "their estimate (ds.estimate_memory), and the largest batch for a GPU of 80 GB (ds.largest_batch)",
    run=run,
    options=[
        int_option("--megabytes", "the tensor's size in MiB (default 16)"),
        int_option("--width", "the model's inputs: an MLP N -> 8 -> 10 (default 65536: 2 MiB of parameters)"),
        int_option("--batch", "examples in the training step's batch (default 64)"),
        Option("--device", dest="device", metavar="D", help="one device only (default: the CPU and each GPU)"),
        Option("--plan-size", dest="plan_size", metavar="SIZE",
               help="the GPU size the largest batch is planned for (default 80GB)"),
        int_option("--plan-width", "the planned model's inputs (default 1048576: 4 MiB of batch an example)"),
    ],
    columns=[
        Column("backend", "backend"), Column("device", "device"), Column("case", "case"),
        Column("expected_mib", "hand count MiB", form="number"), Column("in_use_mib", "kept MiB", form="number"),
        Column("peak_mib", "peak MiB", form="number"), Column("method", "peak taken by"),
        Column("estimate_mib", "estimate MiB", form="number"), Column("seconds", "seconds", form="number"),
        Column("host_mib", "host MiB", form="number"),
    ],
    plot=BarPlot(label="label", value="peak_mib", xlabel="MiB at most above what was in use before"),
    footnote=FOOTNOTE,
)

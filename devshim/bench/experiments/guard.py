"""What the transfer guard costs per op: outside any guard, inside an "allow" block, under "disallow"."""

from __future__ import annotations

import devshim as ds
from devshim.backends import get_backend, specs
from devshim.bench.experiment import (
    BarPlot, Column, Experiment, Option, Steps, check_sizes, device_name, int_option, native_device, ops_for,
    run_steps,
)
from devshim.bench.measure import measure_pair, pair_fields, spread_fields
from devshim.bench.threads import THREADS_OPTION, on_threads

UNGUARDED = "no guard"
#: The guarded conditions, each compared with the op unguarded: (condition, transfer_guard level).
GUARDED = (("allow block", "allow"), ("disallow block", "disallow"))
#: Calls of the op in each timed call, all inside one guard block (or none): the block's own
#: entry and exit (about 3 us for "allow", 25 us for "disallow", which installs the hooks, on
#: torch on this project's machine) is spread over the batch, and the rows' times are per op.
BATCH = 1000


def _batch(fn, args, level):
    """A callable running `BATCH` calls of `fn(*args)`, in one `transfer_guard(level)` block (none
    for `level` None); it returns the last output, so a wait on it covers the batch."""
    def unguarded():
        return run_steps(BATCH, fn, *args)

    if level is None:
        return unguarded

    def guarded():
        with ds.transfer_guard(level):
            return unguarded()

    return guarded


def _per_op(fields: dict) -> dict:
    """Row fields of a measurement of whole batches (`spread_fields`), with its times per op."""
    for key in ("seconds", "seconds_iqr", "seconds_q1", "seconds_q3"):
        fields[key] /= BATCH
    return fields


def _guarded_row(where: dict, condition: str, c) -> dict:
    """The row of one guarded condition from its comparison with the op unguarded (`c`)."""
    fields = pair_fields(c, "unguarded", "guarded")
    for key in ("guarded_seconds", "guarded_iqr", "unguarded_iqr"):
        del fields[key]
    base = fields.pop("unguarded_seconds") / BATCH
    low, high = fields["ratio_low"], fields["ratio_high"]
    return {**where, "condition": condition, **_per_op(spread_fields(c.second)), **fields,
            "unguarded_seconds": base, "over_unguarded": base * (c.ratio - 1),
            "over_unguarded_low": base * (low - 1), "over_unguarded_high": base * (high - 1)}


@on_threads
def run(size: int = 8, *, backend=None, device=None, min_run_time: float = 0.1, progress=None) -> list:
    """Time one small op (`add` of two `size`-element tensors on one device) and one
    implicit host read of a host tensor (`ops.item`: `t.item()`, `float(t)`,
    `a.asscalar()`), outside any guard, inside `transfer_guard("allow")` and inside
    `transfer_guard("disallow")`.

    Nothing moves, so the guard lets every call through: what is measured is what
    checking costs. Each timed call runs a batch of `BATCH` (1000) calls of the op inside one
    guard block (the unguarded side the same batch with no block), so the block's own entry
    and exit weigh a thousandth per op; the rows' times are per op (the batch's time / 1000). Each
    guarded condition is measured side by side with the unguarded batch
    (`devshim.timing.compare`: their runs take turns, so both see the same machine). Rows:
    operation, condition, seconds (per op) with its spread, ratio (guarded / unguarded:
    the median of the per-pair ratios, with ratio_low/high their quartiles),
    over_unguarded (seconds the guard adds per op: (ratio - 1) x unguarded_seconds, the
    unguarded time per op of the same comparison), and the comparison's flags (noisy,
    stalled, settled). The "no guard" row is the unguarded side of the "allow" comparison.
    A backend without a `guard.py` (NumPy) gives one row saying so.

    Example:
        >>> for row in run(backend="torch"):
        ...     print(row["operation"], row["condition"], row["ratio"])
    """
    size = int(check_sizes([size], "guard size")[0])
    adapter = get_backend(backend)
    name = adapter.name
    if not specs()[adapter.name].has_module("guard"):
        return [{"backend": name, "operation": "-", "condition": "-", "note": f"{name} has no transfer guard"}]
    ops = ops_for(name)
    target = adapter.try_gpu() if device is None else native_device(device, name)
    a, b = ops.rand((size,), target), ops.rand((size,), target)
    host_one = ops.rand((1,), adapter.cpu())
    cases = (("add (same device)", ops.add, (a, b)), ("host read of a host tensor", ops.item, (host_one,)))
    plan = Steps(progress)

    def one(operation: str, fn, args) -> list:
        where = {"backend": name, "device": device_name(target, name), "operation": operation}
        unguarded = _batch(fn, args, None)
        found = [(condition, measure_pair(unguarded, _batch(fn, args, level), warmup=1, min_run_time=min_run_time,
                                          device=target, labels=(UNGUARDED, condition)))
                 for condition, level in GUARDED]
        base = found[0][1].first
        return [{**where, "condition": UNGUARDED, **_per_op(spread_fields(base)), "ratio": 1.0,
                 "ratio_low": 1.0, "ratio_high": 1.0, "unguarded_seconds": base.median / BATCH,
                 "over_unguarded": 0.0}] + [_guarded_row(where, condition, c) for condition, c in found]

    for operation, fn, args in cases:
        plan.add(f"{name} {operation}", one, operation, fn, args)
    return plan.run()


EXPERIMENT = Experiment(
    "guard",
    summary="what ds.transfer_guard costs per op: unguarded, in an allow block, under disallow",
    run=run,
    options=[
        int_option("--size", "elements of the added tensors (default 8)"),
        Option("--device", dest="device", metavar="D", help="where the op runs (default: try_gpu())"),
        THREADS_OPTION,
    ],
    columns=[
        Column("backend", "backend"), Column("device", "device"), Column("operation", "operation"),
        Column("condition", "condition"), Column("seconds", "time", form="seconds"),
        Column("over_unguarded", "added", form="seconds"), Column("ratio", "vs unguarded", form="ratio"),
        Column("threads", "threads", form="number"), Column("note", "note"),
    ],
    plot=BarPlot(label="condition", value="ratio", reference=1.0,
                 xlabel="time / unguarded time (bars: quartiles over the pairs)"),
)

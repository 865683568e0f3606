"""What the transfer guard costs per op: outside any guard, inside an "allow" block, under "disallow"."""

from __future__ import annotations

import devshim as ds
from devshim.backends import get_backend, specs
from devshim.bench.experiment import (
    BarPlot, Column, Experiment, Option, Steps, check_sizes, device_name, native_device, ops_for,
)
from devshim.bench.measure import measure, spread_fields
from devshim.bench.threads import THREADS_OPTION, on_threads

CONDITIONS = (("no guard", None), ("allow block", "allow"), ("disallow block", "disallow"))
#: Turns each condition is measured in; the quickest is kept.
ROUNDS = 3


class _Unguarded:
    """A stand-in for `ds.transfer_guard` that guards nothing."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None


@on_threads
def run(size: int = 8, *, backend=None, device=None, min_run_time: float = 0.1, progress=None) -> list:
    """Time one small op (`add` of two `size`-element tensors on one device) and one
    implicit host read of a host tensor (`ops.item`: `t.item()`, `float(t)`,
    `a.asscalar()`), outside any guard, inside
    `transfer_guard("allow")` and inside `transfer_guard("disallow")`.

    Nothing moves, so the guard lets every call through: what is measured is
    what checking costs. The three conditions are measured in turn, `ROUNDS`
    times, and each keeps its quickest round. Rows: operation, condition, seconds with its spread,
    over_unguarded (seconds added per call) and ratio (this / unguarded).
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
    one = ops.rand((1,), adapter.cpu())
    cases = (("add (same device)", ops.add, (a, b)), ("host read of a host tensor", ops.item, (one,)))
    rows: list = []
    plan = Steps(progress)

    def one(operation: str, fn, args) -> None:
        # The conditions take turns, ROUNDS times, and each keeps its quickest round: a busy
        # machine only ever adds time, and taking turns keeps a slow spell from landing on one
        # condition alone (which would show as a cost, or a saving, of the guard).
        best: dict = {}
        for _ in range(ROUNDS):
            for condition, level in CONDITIONS:
                block = ds.transfer_guard(level) if level else _Unguarded()
                with block:
                    m = measure(fn, *args, warmup=3, min_run_time=min_run_time, device=target)
                if condition not in best or m.median < best[condition].median:
                    best[condition] = m
        found = [{"backend": name, "device": device_name(target, name), "operation": operation,
                  "condition": condition, **spread_fields(best[condition])} for condition, _ in CONDITIONS]
        base = found[0]["seconds"]
        for row in found:
            row["over_unguarded"] = row["seconds"] - base
            row["ratio"] = row["seconds"] / base
        rows.extend(found)

    for operation, fn, args in cases:
        plan.add(f"{name} {operation}", lambda o=operation, f=fn, a=args: one(o, f, a))
    plan.run()
    return rows


EXPERIMENT = Experiment(
    "guard",
    summary="what ds.transfer_guard costs per op: unguarded, in an allow block, under disallow",
    run=run,
    options=[
        Option("--size", dest="size", type=int, metavar="N", help="elements of the added tensors (default 8)"),
        Option("--device", dest="device", metavar="D", help="where the op runs (default: try_gpu())"),
        THREADS_OPTION,
    ],
    columns=[
        Column("backend", "backend"), Column("device", "device"), Column("operation", "operation"),
        Column("condition", "condition"), Column("seconds", "time", form="seconds"),
        Column("over_unguarded", "added", form="seconds"), Column("ratio", "vs unguarded", form="ratio"),
        Column("threads", "threads", form="number"), Column("note", "note"),
    ],
    plot=BarPlot(label="condition", value="ratio", reference=1.0, xlabel="time / unguarded time"),
)

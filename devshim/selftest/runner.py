"""Run the checks and the measurements on one backend, in this process.

`run_backend(name, emit)` calls `emit(event)` for each thing that happens,
as plain dicts, so a parent process can read them as they come and still know
what was running if this process dies:

`{"event": "backend", ...}`      the framework, its version and devices;
`{"event": "start", ...}`        a check or measurement is about to run;
`{"event": "result", ...}`       its outcome: passed, failed or skipped, with a detail;
`{"event": "measurement", ...}`  an experiment's rows;
`{"event": "done"}`              the end.

Every check runs on its own: an exception in one is its failure, and the next
one runs. `python -m devshim.selftest.runner BACKEND FILE` writes the events
to FILE, one JSON document a line (what `devshim selftest` starts per backend).
"""

from __future__ import annotations

import json
import sys
import time
import traceback
import warnings

__all__ = ["run_backend", "memory_records", "MATMUL_SIZES", "TRANSFER_MIB", "MIN_RUN_TIME", "main"]

#: Square matmul sizes measured on the CPU and on each GPU.
MATMUL_SIZES = (64, 1024)
#: Buffer size of the bandwidth measurement, in MiB.
TRANSFER_MIB = 16
#: Seconds each measurement runs for at least (the experiments' own default is longer).
MIN_RUN_TIME = 0.05


def _failure(err: BaseException) -> str:
    """`Type: message (at file:line)`, the line being the innermost frame in devshim or the check."""
    frames = traceback.extract_tb(err.__traceback__)
    ours = [f for f in frames if "devshim" in f.filename.replace("\\", "/")]
    frame = (ours or frames or [None])[-1]
    where = ""
    if frame is not None:
        path = frame.filename.replace("\\", "/")
        path = path[path.rfind("devshim/"):] if "devshim/" in path else path
        where = f" (at {path}:{frame.lineno})"
    text = str(err).strip() or "(no message)"
    kind = "" if type(err).__name__ == "CheckFailed" else f"{type(err).__name__}: "
    return f"{kind}{text}{where}"


def _outcome(fn, *args):
    """(status, detail, seconds) of `fn(*args)`, whatever it raises (bar KeyboardInterrupt)."""
    from devshim.selftest.checks import Skip

    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            detail = fn(*args)
        status, detail = "passed", detail or ""
    except Skip as err:
        status, detail = "skipped", str(err)
    except Exception as err:
        status, detail = "failed", _failure(err)
    return status, detail, time.perf_counter() - started


def _backend_event(name: str) -> dict:
    from devshim.backends import get_backend, specs

    adapter = get_backend(name)
    spec = specs()[adapter.name]
    event = {"event": "backend", "backend": name, "title": spec.title, "version": spec.version(),
             "capabilities": spec.capabilities()}
    try:
        event["devices"] = adapter.device_details()
    except Exception as err:  # reported as the load check's failure too
        event["devices"] = []
        event["devices_error"] = _failure(err)
    event["memory"] = memory_records(name, [device["device"] for device in event["devices"]])
    return event


def memory_records(name: str, devices: list, describe=_failure) -> list:
    """`ds.memory` of each of backend `name`'s `devices` (specs such as "gpu:0"), as plain data; for a
    device whose figures could not be read, an entry with the error in `describe(err)`'s words
    (`devshim info` lists them too).

    Example:
        >>> memory_records("torch", ["cpu:0"])[0]["device"]
        'cpu:0'
    """
    from devshim.device_memory import memory

    found = []
    for device in devices:
        try:
            found.append(memory(device, backend=name).as_dict())
        except Exception as err:  # reported, and the rest listed (the memory checks fail with it too)
            found.append({"device": device, "error": describe(err)})
    return found


def run_backend(name: str, emit, *, measure: bool = True) -> None:
    """Run every check, then the measurements, on backend `name`; report through `emit`.

    Example:
        >>> events = []
        >>> run_backend("numpy", events.append, measure=False)
        >>> [e["status"] for e in events if e["event"] == "result"][:2]
        ['passed', 'passed']
    """
    import devshim as ds
    from devshim.selftest import memory_checks  # noqa: F401 - its checks join CHECKS
    from devshim.selftest.checks import CHECKS, Context, Skip, targets

    def result(group: str, check: str, where: str, status: str, detail: str, seconds: float = 0.0,
               summary: str = "") -> None:
        emit({"event": "result", "backend": name, "group": group, "check": check, "where": where,
              "status": status, "detail": detail, "seconds": round(seconds, 4), "summary": summary})

    emit({"event": "start", "backend": name, "group": "load", "check": f"load {name}", "where": ""})
    holder: dict = {}

    def load():
        holder["event"] = _backend_event(name)
        with ds.use_backend(name):
            holder["ctx"] = Context(name)
        n = len(holder["ctx"].gpus)
        return f"{holder['event']['title']} {holder['event']['version']}, {n} GPU{'s' if n != 1 else ''}"

    status, detail, seconds = _outcome(load)
    if "event" in holder:
        emit(holder["event"])
    result("load", f"load {name}", "", status, detail, seconds)
    ctx = holder.get("ctx")

    def attempt(group: str, check: str, where: str, fn, *args, summary: str = "") -> None:
        """Report that `check` starts on `where`, run `fn(*args)` on the backend (`_outcome`), report its result."""
        emit({"event": "start", "backend": name, "group": group, "check": check, "where": where})
        with ds.use_backend(name):
            status, detail, seconds = _outcome(fn, *args)
        result(group, check, where, status, detail, seconds, summary)

    for declared in CHECKS:
        try:
            if ctx is None:
                raise Skip(f"{name} did not load (see above)")
            missing = [m for m in declared.needs if not ctx.adapter.spec.has_module(m)]
            if missing:
                raise Skip(f"{name} has no {' or '.join(_WHAT[m] for m in missing)}")
            where_args = targets(declared, ctx)
        except Skip as err:
            result(declared.group, declared.name, "", "skipped", str(err), summary=declared.summary)
            continue
        for where, args in where_args:
            attempt(declared.group, declared.name, where, declared.fn, ctx, *args, summary=declared.summary)
    if measure and ctx is not None and ctx.ops is not None:
        _measure(name, ctx, emit, attempt)
    emit({"event": "done", "backend": name})


_WHAT = {"ops": "ops module (devshim/backends/<name>/ops.py)", "guard": "transfer guard",
         "model": "model placement"}


def _measure(name: str, ctx, emit, attempt) -> None:
    """The matmul experiment on the CPU and each GPU, and the transfer experiment on each GPU
    (without one it leaves its rows out, with a line saying so): the same code `devshim
    bench` runs, shorter, on the same CPU threads (one: `devshim.bench.threads`), so the
    figures of the two agree."""
    from devshim.bench.experiments import matmul, transfer

    plans = [("matmul", "", lambda: matmul.run(MATMUL_SIZES, backend=name, min_run_time=MIN_RUN_TIME))]
    for device in ctx.gpus or [ctx.cpu]:
        plans.append(("transfer", ctx.where(device),
                      lambda device=device: transfer.run((TRANSFER_MIB,), backend=name, device=device,
                                                         min_run_time=MIN_RUN_TIME)))
    for experiment, where, run in plans:
        def measured(run=run, experiment=experiment):
            rows = run()
            if rows:
                emit({"event": "measurement", "backend": name, "experiment": experiment, "rows": rows})
            return f"{len(rows)} rows"

        attempt("experiments", experiment, where, measured)


def main(argv=None) -> int:
    """`python -m devshim.selftest.runner BACKEND FILE [--no-measure]`: events to FILE as JSON lines."""
    args = list(sys.argv[1:] if argv is None else argv)
    measure = "--no-measure" not in args
    backend, path = [a for a in args if not a.startswith("--")][:2]
    with open(path, "a", encoding="utf-8") as out:
        def emit(event: dict) -> None:
            out.write(json.dumps(event, default=str) + "\n")
            out.flush()

        run_backend(backend, emit, measure=measure)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

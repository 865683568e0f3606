"""`devshim selftest`: does devshim work on this machine's frameworks and devices?

    devshim selftest [--backend B ...] [--json] [--checks-only] [--timeout S]

For every installed backend (or those named), a fresh Python process runs the
checks of `devshim.selftest.checks` (the device contract, the transfer
guard, model placement, timing) on the CPU and on every GPU that backend
sees, then a short run of the `matmul` and `transfer` experiments of
`devshim bench`. One process per backend keeps frameworks apart (TensorFlow
and JAX each reserve most of a GPU's memory when they start), and a crash or
a hang in one is reported as the failure of the check it was running while
the others go on.

The report (text, or JSON with `--json`) is meant to be pasted into a bug
report: devshim, Python and framework versions, the devices, every check
passed / failed / skipped with its reason, matmul GFLOP/s on the CPU and each
GPU, host-to-device bandwidth, and a verdict. The exit status is 0 when
nothing failed, 1 otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from typing import Optional

import devshim
from devshim import settings
from devshim.backends import canonical_name, specs

__all__ = ["register", "run", "main_status", "DEFAULT_TIMEOUT", "ENV_VARS"]

#: Seconds one backend's process may take before it is stopped and reported as hung.
DEFAULT_TIMEOUT = 180.0
#: The variables that steer devshim; the report shows them.
ENV_VARS = ("DEVSHIM_BACKEND", "DEVSHIM_DEVICE", "DEVSHIM_VIRTUAL_DEVICES", "DEVSHIM_TRANSFER_GUARD")


def register(commands) -> None:
    """Add the `selftest` command to the `devshim` parser."""
    parser = commands.add_parser(
        "selftest", help="check devshim on this machine's frameworks and GPUs; a report for bug reports",
        description=(__doc__ or "").split("\n\n")[0] + " Runs devshim's checks and a short benchmark on every "
        "installed backend and every device it sees; exits 1 if a check failed.",
    )
    parser.add_argument("--backend", action="append", metavar="B",
                        help="check only this backend (repeatable, or comma-separated; default and "
                             "'all': every installed one)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of text")
    parser.add_argument("--checks-only", action="store_true", help="skip the measurements (matmul, transfer)")
    parser.add_argument("--timeout", type=float, metavar="S", default=DEFAULT_TIMEOUT,
                        help=f"seconds allowed per backend (default {DEFAULT_TIMEOUT:g})")
    parser.set_defaults(run=_cmd_selftest)


def _cmd_selftest(args) -> int:
    from devshim.selftest.report import format_report

    def progress(line: str) -> None:
        print(f"selftest: {line}", file=sys.stderr, flush=True)

    document = run(args.backend, measure=not args.checks_only, timeout=args.timeout, progress=progress)
    if args.json:
        json.dump(document, sys.stdout, indent=2, default=str)
        print()
    else:
        print(format_report(document))
    return main_status(document)


def main_status(document: dict) -> int:
    """The exit status for a report: 1 when a check failed, else 0.

    Example:
        >>> main_status({"summary": {"failed": 0}})
        0
    """
    return 1 if document["summary"]["failed"] else 0


def _chosen(names) -> tuple:
    """(backends to check, {backend: why not} for the others)."""
    found = specs()
    parts = [part.strip() for name in names or () for part in str(name).split(",") if part.strip()]
    if parts and not any(part.lower() == "all" for part in parts):
        chosen = list(dict.fromkeys(canonical_name(part) for part in parts))
    else:
        chosen = [n for n, s in found.items() if s.is_installed()]
    left_out = {name: "not asked for (--backend)" for name in found if name not in chosen}
    left_out.update({name: f"not installed ({spec.install_hint()})" for name, spec in found.items()
                     if not spec.is_installed()})
    return [name for name in chosen if name not in left_out], left_out


def _environment_for(backend: str) -> tuple:
    """(environment of the backend's process, notes on what was changed and why)."""
    env = dict(os.environ)
    notes = []
    env[settings.BACKEND_VAR] = backend
    if env.pop(settings.TRANSFER_GUARD_VAR, None):
        notes.append(f"{settings.TRANSFER_GUARD_VAR} unset: the guard checks set their own levels")
    if env.get(settings.VIRTUAL_DEVICES_VAR, "").strip() and not specs()[backend].virtual_devices:
        env.pop(settings.VIRTUAL_DEVICES_VAR)
        notes.append(f"{settings.VIRTUAL_DEVICES_VAR} unset: {backend} has no virtual devices, so its real "
                     f"devices are checked")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env, notes


# The backend's process imports the devshim this one runs: from a checkout, that folder is put
# first on sys.path; an installed devshim (its folder already on sys.path) is found as usual.
_RUNNER = (
    "import sys\n"
    "home = sys.argv.pop(1)\n"
    "if home not in sys.path:\n"
    "    sys.path.insert(0, home)\n"
    "from devshim.selftest.runner import main\n"
    "sys.exit(main())\n"
)


def _read_events(path: str) -> list:
    events = []
    with contextlib.suppress(OSError), open(path, encoding="utf-8") as handle:
        for line in handle:
            with contextlib.suppress(ValueError):  # a blank line, or one cut short by a crash
                events.append(json.loads(line.strip()))
    return events


def _run_one(backend: str, *, measure: bool, timeout: float) -> dict:
    """Run one backend's checks in a fresh process; its section of the report."""
    started = time.perf_counter()
    env, notes = _environment_for(backend)
    handle, path = tempfile.mkstemp(prefix=f"devshim-selftest-{backend}-", suffix=".jsonl")
    os.close(handle)
    problem = _run_process(backend, path, env, measure=measure, timeout=timeout)
    events = _read_events(path)
    with contextlib.suppress(OSError):
        os.unlink(path)
    section: dict = {"name": backend, "notes": notes, "results": [], "measurements": {},
                     "seconds": round(time.perf_counter() - started, 2)}
    running = _fold_events(section, events, finished_cleanly=problem is None)
    if not section.get("complete"):
        section["results"].append(_stopped_result(backend, problem, running))
    return section


def _run_process(backend: str, path: str, env: dict, *, measure: bool, timeout: float) -> Optional[str]:
    """Run the backend's checks in a fresh interpreter writing events to `path`; what went
    wrong with the process (None when it ended well)."""
    home = os.path.dirname(os.path.dirname(os.path.abspath(devshim.__file__)))
    command = [sys.executable, "-c", _RUNNER, home, backend, path]
    if not measure:
        command.append("--no-measure")
    try:
        done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              timeout=timeout, text=True, errors="replace")
    except subprocess.TimeoutExpired:
        return f"the {backend} process was stopped after {timeout:g} s (--timeout)"
    if done.returncode == 0:
        return None
    tail = " | ".join(line for line in done.stderr.strip().splitlines()[-3:])
    return f"the {backend} process ended with exit status {done.returncode}" + (f": {tail}" if tail else "")


def _fold_events(section: dict, events: list, *, finished_cleanly: bool) -> Optional[dict]:
    """Fill `section` from the process's events; the check that was running when they stop."""
    running = None
    for event in events:
        kind = event.pop("event")
        if kind == "backend":
            section.update({k: v for k, v in event.items() if k != "backend"})
        elif kind == "start":
            running = event
        elif kind == "result":
            event.pop("backend", None)
            section["results"].append(event)
            running = None
        elif kind == "measurement":
            section["measurements"].setdefault(event["experiment"], []).extend(event["rows"])
        elif kind == "done":
            running = None
            if finished_cleanly:
                section["complete"] = True
    return running


def _stopped_result(backend: str, problem: Optional[str], running: Optional[dict]) -> dict:
    """The failed result that stands for a process that stopped before finishing."""
    problem = problem or f"the {backend} process stopped before finishing"
    what = (f"while running {running['check']}" + (f" on {running['where']}" if running.get("where") else "")
            if running else "")
    return {
        "group": running["group"] if running else "load", "check": running["check"] if running else f"load {backend}",
        "where": running.get("where", "") if running else "", "status": "failed",
        "detail": f"{problem} {what}".strip() + "; the checks after it did not run", "seconds": 0.0,
    }


def _count(sections: list) -> dict:
    statuses = [result["status"] for section in sections for result in section["results"]]
    return {status: statuses.count(status) for status in ("passed", "failed", "skipped")}


def run(backends=None, *, measure: bool = True, timeout: float = DEFAULT_TIMEOUT, progress=None) -> dict:
    """Check `backends` (default: every installed one), one fresh process each; the report as data.

    Example:
        >>> document = run(["numpy"], measure=False)
        >>> document["summary"]["failed"], document["verdict"][:6]
        (0, 'PASSED')
    """
    chosen, left_out = _chosen(backends)
    started = time.perf_counter()
    progress = progress if progress is not None else (lambda line: None)
    sections = []
    for backend in chosen:
        progress(f"checking {backend} ...")
        section = _run_one(backend, measure=measure, timeout=timeout)
        counts = _count([section])
        progress(f"{backend}: {counts['passed']} passed, {counts['failed']} failed, "
                 f"{counts['skipped']} skipped in {section['seconds']:.1f} s")
        sections.append(section)
    summary = {**_count(sections), "seconds": round(time.perf_counter() - started, 1)}
    document = {
        "devshim": devshim.__version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "cpu_count": os.cpu_count(),
        "environment": {var: os.environ.get(var) for var in ENV_VARS},
        "backends": sections,
        "not_checked": left_out,
        "summary": summary,
    }
    document["verdict"] = _verdict(document)
    return document


def _verdict(document: dict) -> str:
    summary = document["summary"]
    names = [s["name"] for s in document["backends"]]
    total = summary["passed"] + summary["failed"] + summary["skipped"]
    if not names:
        return ("NOTHING CHECKED: no backend was installed or asked for; install one "
                f"({specs()['torch'].install_hint()}) or name one with --backend.")
    if summary["failed"]:
        failed = [f"{s['name']} {r['check']}" + (f" on {r['where']}" if r["where"] else "")
                  for s in document["backends"] for r in s["results"] if r["status"] == "failed"]
        shown = "; ".join(failed[:3]) + (f"; and {len(failed) - 3} more" if len(failed) > 3 else "")
        return (f"FAILED: {summary['failed']} of {total} checks failed ({shown}). devshim does not work "
                f"as documented here: please paste this whole report into a bug report.")
    skipped = f", {summary['skipped']} skipped (reasons above)" if summary["skipped"] else ""
    return (f"PASSED: {summary['passed']} checks passed{skipped}, none failed, on "
            f"{', '.join(names)} in {summary['seconds']:g} s.")

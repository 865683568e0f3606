"""The pytest plugin `tools/gpu_check.py` loads into each suite pass (`-p gpu_check_plugin`).

- Every test's outcome is written as pytest reports it, one JSON line each, to the file
  `GPU_CHECK_OUTCOMES` names: `[node id, phase, outcome, first line of a failure, seconds]`
  (a passed test's call phase, and every phase that did not pass). A pass stopped at its time
  limit still says what ran and what failed, and the check's pass weights are measured from
  these files (`gpu_check.py --update-weights`).
- `GPU_CHECK_SELECT` (`gpu_check.py --select`) names a file of node ids and test files, one a
  line: only the tests it names are kept, as pytest's command line takes them (the id itself,
  or its file, class or test without parameters).

- `GPU_CHECK_FAILURES` names a file where each failure's whole report (its traceback, the last
  `FAILURE_LINES` lines) is written as it happens: pytest prints tracebacks only at the end of a
  run, so a pass stopped at its time limit would otherwise keep none.

With pytest-xdist, the controller writes the workers' reports (a worker writes nothing).
"""

from __future__ import annotations

import json
import os

_WORKER: list = []
#: What one outcome line holds (its first line of a failure cut to this many characters).
MESSAGE_CHARS = 200
#: The lines of a failure's report kept in the failures file (its end: where it failed, and why).
FAILURE_LINES = 80


def pytest_configure(config) -> None:
    _WORKER.append(hasattr(config, "workerinput"))  # an xdist worker: its controller writes its reports


def pytest_collection_modifyitems(config, items: list) -> None:
    chosen = os.environ.get("GPU_CHECK_SELECT")
    if chosen:
        with open(chosen, encoding="utf-8") as handle:
            wanted = set(handle.read().splitlines())
        items[:] = [item for item in items if wanted_by(item.nodeid, wanted)]


def wanted_by(nodeid: str, wanted: set) -> bool:
    """Whether `wanted` (node ids and paths) names `nodeid`: the id itself, or its file, class or
    test without parameters, as pytest's command line takes them.

    Example:
        >>> wanted_by("tests/test_a.py::test_x[torch]", {"tests/test_a.py::test_x"})
        True
    """
    parts = nodeid.split("[")[0].split("::")
    return nodeid in wanted or any("::".join(parts[:end]) in wanted for end in range(1, len(parts) + 1))


def outcome_line(report) -> str:
    """The JSON line of one report: node id, phase, outcome, a failure's last line, seconds.

    Example:
        >>> outcome_line(report)
        '["tests/test_a.py::test_x", "call", "passed", "", 0.12]'
    """
    message = ""
    if report.failed and report.longrepr:
        lines = str(report.longrepr).strip().splitlines()
        message = lines[-1][:MESSAGE_CHARS] if lines else ""
    return json.dumps([report.nodeid, report.when, report.outcome, message, round(report.duration, 2)])


def failure_text(report) -> str:
    """A failed report's node id and phase, then the end of its report (`FAILURE_LINES` lines).

    Example:
        >>> print(failure_text(report))
        ######## tests/test_a.py::test_x (call)
        Traceback ...
        AssertionError: ...
    """
    lines = str(report.longrepr).rstrip().splitlines()[-FAILURE_LINES:] if report.longrepr else []
    return "\n".join([f"######## {report.nodeid} ({report.when})", *lines, "", ""])


def pytest_runtest_logreport(report) -> None:
    if (_WORKER and _WORKER[-1]) or (report.when != "call" and report.outcome == "passed"):
        return
    target, failures = os.environ.get("GPU_CHECK_OUTCOMES"), os.environ.get("GPU_CHECK_FAILURES")
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(outcome_line(report) + "\n")
    if failures and report.failed:
        with open(failures, "a", encoding="utf-8") as handle:
            handle.write(failure_text(report))

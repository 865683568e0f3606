"""What `import devshim` adds to a Python process's start, and what its first call adds."""

from __future__ import annotations

import subprocess
import sys

from devshim.bench.experiment import BarPlot, Column, Experiment, Steps
from devshim.bench.measure import measure, spread_fields

CASES = (
    ("python -c pass", "pass"),
    ("import devshim", "import devshim"),
    ("import devshim; devshim.cpu()", "import devshim; devshim.cpu(backend='numpy')"),
)


def run(*, backend=None, min_run_time: float = 1.0, progress=None) -> list:
    """Wall time of fresh interpreters: bare, importing devshim, and making its first call.

    Each case starts `sys.executable` in a new process, again and again for
    `min_run_time` seconds (the median start counts). Rows: case, seconds with its spread, and over_bare
    (seconds above the bare interpreter's). The first call uses the NumPy
    backend, so no framework's own import is counted.

    Example:
        >>> bare, imported, first_call = run()
        >>> imported["over_bare"] * 1e3   # milliseconds import devshim adds
    """
    plan = Steps(progress)

    def one(label: str, code: str) -> dict:
        command = [sys.executable, "-c", code]
        m = measure(lambda: subprocess.run(command, check=True), min_run_time=min_run_time, warmup=1)
        return {"case": label, **spread_fields(m)}

    for label, code in CASES:
        plan.add(label, one, label, code)
    rows = plan.run()
    for row in rows:
        row["over_bare"] = row["seconds"] - rows[0]["seconds"]
    return rows


EXPERIMENT = Experiment(
    "startup",
    summary="what import devshim (and its first call) adds to a fresh Python process",
    run=run,
    options=[],
    columns=[
        Column("case", "case"), Column("seconds", "time", form="seconds"),
        Column("over_bare", "over bare python", form="seconds"),
    ],
    plot=BarPlot(label="case", value="seconds", scale=1e3, xlabel="milliseconds per start (median, IQR bars)"),
    per_backend=False,
)

"""How many CPU threads a framework computes on while an experiment measures.

By default the experiments run the framework on one thread where it can be set while running
(PyTorch), as `torch.utils.benchmark.Timer` does (its `num_threads=1`): one thread measures
the code, the same on any machine, while several also measure the machine. A kernel split over
several threads waits for the slowest of them, and on a machine shared with other work a thread
whose CPU is taken waits a scheduler slice: on this project's 2-CPU machines, with one other
process running, a 64x64 float32 torch matmul took 6.7 us on one thread and 20 to 24 ms on two,
call after call. `--threads N` measures on N threads instead (the CPU's full speed for large
work on a quiet machine); every row computed on the host says how many threads it used.

Example:
    >>> from devshim.bench.threads import framework_threads
    >>> with framework_threads("torch", None) as used:
    ...     rows = measure_everything()
    >>> used
    1
"""

from __future__ import annotations

import contextlib
import functools
from typing import Optional

from devshim.backends import get_backend
from devshim.bench.experiment import check_count, int_option, ops_for
from devshim.errors import ExperimentError

__all__ = ["DEFAULT_THREADS", "THREADS_OPTION", "framework_threads", "on_threads", "on_host"]

#: Threads the experiments use where the framework can be set while running.
DEFAULT_THREADS = 1

THREADS_OPTION = int_option(
    "--threads", "the framework's CPU threads while measuring (default 1, as torch.utils.benchmark: several "
    "threads on a shared machine also time how long they wait for each other); PyTorch only, "
    "other frameworks keep their own setting")


@contextlib.contextmanager
def framework_threads(backend: str, wanted: Optional[int]):
    """Run the block with `backend`'s CPU threads set to `wanted` (None: `DEFAULT_THREADS`
    where the framework can be set, else its own setting), put back afterwards; yields the
    count the block runs on, or None where the framework does not say.

    Example:
        >>> with framework_threads("torch", 2) as used:
        ...     used
        2
    """
    if wanted is not None:
        check_count(wanted, "threads")
    ops = ops_for(backend)
    setter, getter = getattr(ops, "set_threads", None), getattr(ops, "threads", None)
    if setter is None:
        if wanted is not None:
            raise ExperimentError(
                f"--threads: {backend} cannot change its CPU threads while running. Leave --threads "
                f"out, or start the process with the framework's own setting (for example "
                f"OMP_NUM_THREADS={wanted} for NumPy's BLAS and MXNet).")
        yield getter() if getter is not None else None
        return
    before = setter(DEFAULT_THREADS if wanted is None else wanted)
    try:
        yield getter() if getter is not None else (DEFAULT_THREADS if wanted is None else wanted)
    finally:
        setter(before)


def on_host(row: dict) -> bool:
    """Whether a row's work ran on the host CPU: the CPU itself, or a virtual GPU (which
    computes there).

    Example:
        >>> on_host({"device": "gpu:0 (virtual)"}), on_host({"device": "gpu:0"})
        (True, False)
    """
    where = str(row.get("device") or row.get("devices") or "")
    return where.startswith("cpu") or "(virtual)" in where


def on_threads(run):
    """Give an experiment's `run` a `threads` keyword (see `framework_threads`) and put
    `threads` in each row computed on the host.

    Example:
        >>> @on_threads
        ... def run(sizes=(64,), *, backend=None, min_run_time=0.2, progress=None): ...
    """

    @functools.wraps(run)
    def measured(*args, threads: Optional[int] = None, backend=None, **kwargs):
        name = get_backend(backend).name
        with framework_threads(name, threads) as used:
            rows = run(*args, backend=backend, **kwargs)
        for row in rows:
            if "omitted" not in row and on_host(row):
                row["threads"] = used
        return rows

    return measured

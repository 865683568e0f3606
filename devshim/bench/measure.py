"""Measurements for the experiments: ``ds.benchmark``, re-measured while too noisy.

``ds.benchmark`` warms up until the figures settle; a measurement whose runs still disagree
(their IQR above ``NOISE_SHARE`` of the median: the machine was busy while it ran) is
measured again, up to ``TRIES`` times in all, and the steadiest try is kept (a settled one
before one whose warm-up ran out of time). If even that one disagrees, the row is flagged
``noisy``; one whose warm-up never settled is flagged ``settled: False``. Every row carries
its spread, so the table, the JSON and the plot can show it.
"""

from __future__ import annotations

from typing import Any, Callable

from devshim.timing import Measurement, benchmark
from devshim.timing.settle import NOISE_SHARE

__all__ = ["NOISE_SHARE", "TRIES", "measure", "spread_fields"]

#: Measurements made at most for one number.
TRIES = 3


def measure(fn: Callable[..., Any], *args: Any, min_run_time: float, **options: Any) -> Measurement:
    """The steadiest of up to ``TRIES`` ``ds.benchmark`` runs of ``fn(*args)``.

    The returned Measurement has one more attribute, ``tries`` (how many were made);
    its ``noisy`` and ``settled`` say whether even the steadiest disagrees or never settled.

    Example:
        >>> m = measure(torch.matmul, a, b, min_run_time=0.2, warmup=1)
        >>> m.median, m.iqr, m.tries, m.noisy, m.settled
    """
    best = benchmark(fn, *args, min_run_time=min_run_time, **options)
    attempt = 1
    while attempt < TRIES and not (best.settled and not best.noisy):
        attempt += 1
        m = benchmark(fn, *args, min_run_time=min_run_time, **options)
        if _unsteadiness(m) < _unsteadiness(best):
            best = m
    best.tries = attempt
    return best


def _unsteadiness(m: Measurement) -> tuple:
    return (not m.settled, m.spread)


def spread_fields(m: Measurement, key: str = "seconds") -> dict:
    """The row fields describing measurement ``m``: ``<key>``, ``<key>_iqr``, quartiles, and flags.

    Example:
        >>> spread_fields(m)
        {'seconds': 0.0012, 'seconds_iqr': 4e-05, ..., 'noisy': False, 'settled': True, 'busy': False, 'tries': 1, 'runs': 40}
    """
    q1, q3 = m.quartiles()
    return {
        key: m.median, f"{key}_iqr": m.iqr, f"{key}_q1": q1, f"{key}_q3": q3,
        "noisy": m.noisy, "settled": m.settled, "busy": m.busy, "tries": m.tries, "runs": m.runs,
    }

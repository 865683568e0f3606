"""Measurements for the experiments: `ds.benchmark`, or two ways side by side, re-measured
while they cannot be trusted.

`ds.benchmark` warms up until the figures settle; a measurement whose runs still disagree
(their IQR above `NOISE_SHARE` of the median: the machine was busy while it ran), whose runs
stalled (a quarter of them or more waited for a CPU, or took over 1.5x the fastest), or
whose warm-up never settled is measured again, up to `TRIES` times in all, and the steadiest
try is kept. If even that one is not to be trusted, the row says so (`noisy`, `stalled`,
`settled: False`). Two ways of doing one thing are measured with
`devshim.timing.compare`: their runs take turns, so both see the same machine, and the row's
ratio is the median of the per-pair ratios, with their quartiles. Every row carries its
spread, so the table, the JSON and the plot can show it.
"""

from __future__ import annotations

from typing import Any, Callable

from devshim.timing import Measurement, benchmark
from devshim.timing.compare import Comparison, compare
from devshim.timing.settle import NOISE_SHARE

__all__ = ["NOISE_SHARE", "TRIES", "measure", "measure_pair", "spread_fields", "rate_fields", "side_fields",
           "pair_fields"]

#: Measurements made at most for one number.
TRIES = 3


def measure(fn: Callable[..., Any], *args: Any, min_run_time: float, **options: Any) -> Measurement:
    """The steadiest of up to `TRIES` `ds.benchmark` runs of `fn(*args)`.

    The returned Measurement has one more attribute, `tries` (how many were made);
    its `noisy`, `stalled` and `settled` say whether even the steadiest disagrees,
    stalled, or never settled.

    Example:
        >>> m = measure(torch.matmul, a, b, min_run_time=0.2, warmup=1)
        >>> m.median, m.iqr, m.tries, m.noisy, m.stalled, m.settled
    """
    return _steadiest(lambda: benchmark(fn, *args, min_run_time=min_run_time, **options))


def _steadiest(make):
    """The steadiest of up to `TRIES` results of `make()` (a Measurement or a Comparison), made
    until one can be trusted; its `tries` says how many were made."""
    best = make()
    attempt = 1
    while attempt < TRIES and _unsteadiness(best) > (False, False, 0.0):
        attempt += 1
        found = make()
        if _unsteadiness(found) < _unsteadiness(best):
            best = found
    best.tries = attempt
    return best


def _unsteadiness(m) -> tuple:
    """What makes a try worse, most important first; (False, False, 0.0) only when it is
    settled and free of stalls and its spread is within `NOISE_SHARE`."""
    return (not m.settled, m.stalled, m.spread if m.noisy else 0.0)


def measure_pair(first: Callable[[], Any], second: Callable[[], Any], *, min_run_time: float,
                 **options: Any) -> Comparison:
    """The most trustworthy of up to `TRIES` side-by-side comparisons of `first()` and
    `second()` (`devshim.timing.compare`); `tries` says how many were made.

    Example:
        >>> c = measure_pair(native, ours, min_run_time=0.05, device=target)
        >>> c.ratio, c.quartiles(), c.confident, c.tries
    """
    return _steadiest(lambda: compare(first, second, min_run_time=min_run_time, **options))


def spread_fields(m: Measurement, key: str = "seconds") -> dict:
    """The row fields describing measurement `m`: `<key>`, its IQR (`<key>_iqr`, or for a key
    ending in `_seconds` the same key ending in `_iqr`: `native_seconds`, `native_iqr`, as the
    table reads it), quartiles, and flags.

    Example:
        >>> spread_fields(m)
        {'seconds': 0.0012, 'seconds_iqr': 4e-05, ..., 'noisy': False, 'settled': True, 'stalled': False, ...}
    """
    q1, q3 = m.quartiles()
    return {
        key: m.median, f"{key.removesuffix('_seconds')}_iqr": m.iqr, f"{key}_q1": q1, f"{key}_q3": q3,
        "noisy": m.noisy, "settled": m.settled, "stalled": m.stalled, "stalls": m.stalls,
        "busy": m.busy, "tries": m.tries, "runs": m.runs,
    }


def rate_fields(m: Measurement, amount: float, key: str) -> dict:
    """The row fields of a rate: `amount` (flops, bytes) per second of measurement `m`, in billions,
    as `<key>`, with `<key>_low`/`<key>_high` from the slowest and fastest quartile.

    Example:
        >>> rate_fields(m, 2 * 64**3, "gflops")
        {'gflops': 12.1, 'gflops_low': 11.8, 'gflops_high': 12.4}
    """
    q1, q3 = m.quartiles()
    return {key: amount / m.median / 1e9, f"{key}_low": amount / q3 / 1e9, f"{key}_high": amount / q1 / 1e9}


def side_fields(c: Comparison, m: Measurement, ratio: str, compared: bool = True) -> dict:
    """The row fields of side `m` of comparison `c`: `spread_fields(m)`; `<ratio>` with
    `<ratio>_low`/`<ratio>_high`, the comparison's ratio and its quartiles (`compared`), or 1.0
    for the side the other is measured against; and the flags of the comparison and this side.

    Example:
        >>> c = measure_pair(fast, slow, min_run_time=0.3)
        >>> side_fields(c, c.second, "slowdown")["slowdown"], side_fields(c, c.first, "slowdown", False)["slowdown"]
        (3.2, 1.0)
    """
    low, high = c.quartiles() if compared else (1.0, 1.0)
    return {**spread_fields(m), ratio: c.ratio if compared else 1.0, f"{ratio}_low": low, f"{ratio}_high": high,
            "noisy": c.noisy or m.noisy, "stalled": c.stalled, "settled": c.settled, "tries": c.tries}


def pair_fields(c: Comparison, first: str, second: str, ratio: str = "ratio") -> dict:
    """The row fields of a side-by-side comparison: each side's median and IQR (as
    `<first>_seconds`, `<first>_iqr`, ...), the ratio `second / first` (median over the
    pairs) with `<ratio>_low`/`<ratio>_high` (their quartiles), and the flags, which hold
    for the whole row: `noisy` when the ratios or either side's runs disagree, `stalled`
    when a quarter of the pairs or more had a stalled run.

    Example:
        >>> pair_fields(measure_pair(native, ours, min_run_time=0.05), "native", "devshim")
        {'native_seconds': 1.2e-05, ..., 'ratio': 1.04, 'ratio_low': 1.02, 'ratio_high': 1.07, ...}
    """
    low, high = c.quartiles()
    return {
        f"{first}_seconds": c.first.median, f"{first}_iqr": c.first.iqr,
        f"{second}_seconds": c.second.median, f"{second}_iqr": c.second.iqr,
        ratio: c.ratio, f"{ratio}_low": low, f"{ratio}_high": high,
        "noisy": c.noisy or c.first.noisy or c.second.noisy, "settled": c.settled, "stalled": c.stalled,
        "stalls": c.stalls, "pairs": len(c.ratios), "busy": c.first.busy or c.second.busy,
        "tries": c.tries, "runs": len(c.ratios),
    }

"""ds.benchmark measures what torch.utils.benchmark measures.

On the same 512x512 float32 matmul, in one process, the medians of
ds.benchmark and torch.utils.benchmark.Timer.blocked_autorange agree within
5%. This compares two measurements of one thing, never speed against a fixed
number.

Two cores shared with other work make single measurements swing by tens of
percent, so the test is built to compare like with like:
- both run on one thread (multi-threaded kernels stall on descheduled workers);
- the two alternate in short rounds, each going first in every other round;
- a round counts only when both of its measurements were steady (at least 4
  runs, IQR within 10% of the median): a round disturbed by load from
  elsewhere says nothing about agreement;
- the verdict is the median ratio over the steady rounds.
If the machine is too busy to give enough steady rounds within the time
budget, the test skips and says so rather than guess.
"""

from __future__ import annotations

import statistics
import time
import warnings

import pytest

import devshim as ds

MIN_RUN_TIME = 0.05    # seconds per measurement
WANTED = 9             # steady rounds for a verdict
AT_LEAST = 5           # fewest steady rounds a verdict may rest on
BUDGET = 20.0          # seconds to collect them in
TOLERANCE = 0.05


class BenchmarkAgreement(UserWarning):
    """Carries the ratio into pytest's warnings summary, so it shows in every log."""


def _steady(median: float, iqr: float, runs: int) -> bool:
    return runs >= 4 and iqr <= 0.1 * median


def test_median_agrees_with_torch_blocked_autorange(record_property):
    torch = pytest.importorskip("torch")
    tb = pytest.importorskip("torch.utils.benchmark")
    a = torch.randn(512, 512, dtype=torch.float32)
    b = torch.randn(512, 512, dtype=torch.float32)
    reference = tb.Timer("torch.matmul(a, b)", globals={"torch": torch, "a": a, "b": b}, num_threads=1)

    def ours():
        m = ds.benchmark(torch.matmul, a, b, min_run_time=MIN_RUN_TIME)
        return m.median, _steady(m.median, m.iqr, m.runs)

    def theirs():
        m = reference.blocked_autorange(min_run_time=MIN_RUN_TIME)
        return m.median, _steady(m.median, m.iqr, len(m.times))

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    steady, rounds = [], 0
    deadline = time.monotonic() + BUDGET
    try:
        while len(steady) < WANTED and time.monotonic() < deadline:
            if rounds % 2:
                (t, t_ok), (o, o_ok) = theirs(), ours()
            else:
                (o, o_ok), (t, t_ok) = ours(), theirs()
            rounds += 1
            if o_ok and t_ok:
                steady.append((o / t, o, t))
    finally:
        torch.set_num_threads(threads)

    if len(steady) < AT_LEAST:
        pytest.skip(f"the machine was too busy to compare: only {len(steady)} of {rounds} rounds "
                    f"were steady in {BUDGET:.0f} s (need {AT_LEAST})")
    ratio = statistics.median(r for r, _, _ in steady)
    summary = (
        f"ds.benchmark / torch blocked_autorange median ratio = {ratio:.4f} over {len(steady)} steady "
        f"of {rounds} rounds (512x512 float32 matmul, 1 thread; medians "
        f"{statistics.median(o for _, o, _ in steady) * 1e3:.3f} ms vs "
        f"{statistics.median(t for _, _, t in steady) * 1e3:.3f} ms)"
    )
    print(summary)
    record_property("benchmark_median_ratio", ratio)
    warnings.warn(summary, BenchmarkAgreement, stacklevel=1)
    assert abs(ratio - 1) <= TOLERANCE, summary

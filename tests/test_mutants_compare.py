"""`devshim.timing.compare`: what a comparison promises that the mutation env (`tox -e mutation`,
tools/mutation.py) found no test holding it to: the ratio where one side took no time, the
quartiles of few pairs, how many pairs are made, the warm-up's budget, the arguments each side
is measured with, and the garbage collector put back. On a fake clock, so the numbers are exact."""

from __future__ import annotations

import gc

import pytest

import devshim as ds
from devshim.timing import settle
from devshim.timing.compare import MIN_PAIRS, Comparison, compare
from fake_queue import FakeQueue, fake_queue_backend

# Seconds of one call on the fake clock: a power of two, so that sums of them are exact.
TICK = 2.0 ** -10


class Clock:
    """A clock that moves only when a test's function says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def work(self, seconds: float):
        """A function that takes `seconds` on this clock."""

        def fn():
            self.now += seconds

        return fn


@pytest.fixture(autouse=True)
def idle_machine(monkeypatch):
    """The load average as on an idle machine (the test machine may be busy)."""
    monkeypatch.setattr(settle, "machine_load", lambda: (0.1, 4))


def _measurement(times) -> ds.Measurement:
    return ds.Measurement(list(times), number_per_run=1, settled=True)


# ------------------------------------------------------------------ the ratios


def test_a_side_that_took_no_time_gives_an_infinite_ratio_not_an_error():
    c = Comparison(_measurement([0.0, 1e-3, 0.0]), _measurement([1e-3, 2e-3, 5e-4]))
    assert c.ratios == [float("inf"), 2.0, float("inf")]


def test_sides_of_different_lengths_are_refused_naming_both():
    with pytest.raises(ds.TimingError, match="as many runs on each side, not 3 and 4"):
        Comparison(_measurement([1e-3] * 3), _measurement([1e-3] * 4))


@pytest.mark.parametrize("ratios, quartiles", [
    ([1.0, 3.0], (1.5, 2.5)),                     # two pairs: the quartiles between them
    ([1.0, 2.0, 3.0], (1.5, 2.5)),
    ([1.0, 2.0, 3.0, 4.0, 5.0], (2.0, 4.0)),        # inclusive quartiles: the middle of each half
    ([2.0], (2.0, 2.0)),                          # one pair: no spread to show
])
def test_the_quartiles_are_the_inclusive_ones_of_the_per_pair_ratios(ratios, quartiles):
    c = Comparison(_measurement([1.0] * len(ratios)), _measurement(ratios))
    assert c.quartiles() == pytest.approx(quartiles)


# ------------------------------------------------------------------ how many pairs


def test_a_comparison_stops_at_its_minimum_of_pairs_once_both_sides_measured_their_time():
    clock = Clock()
    c = compare(clock.work(TICK), clock.work(TICK), min_run_time=TICK, clock=clock)
    assert len(c.ratios) == MIN_PAIRS


def test_a_comparison_stops_as_soon_as_both_sides_measured_min_run_time():
    """One call takes TICK; min_run_time is 16 of them: 16 pairs, not one more."""
    clock = Clock()
    c = compare(clock.work(TICK), clock.work(TICK), min_run_time=16 * TICK, clock=clock)
    assert (len(c.ratios), c.first.number_per_run, c.second.number_per_run) == (16, 1, 1)


def test_the_faster_side_is_measured_for_min_run_time_too():
    """The first side takes twice as long as the second: the pairs go on until the second side,
    too, has been measured for min_run_time."""
    clock = Clock()
    c = compare(clock.work(2 * TICK), clock.work(TICK), min_run_time=32 * TICK, clock=clock)
    measured = [sum(side.times) * side.number_per_run for side in (c.first, c.second)]
    assert measured[1] >= 32 * TICK and len(c.ratios) == 32 and c.ratio == pytest.approx(0.5)


def test_a_comparison_makes_max_pairs_at_most():
    clock = Clock()
    c = compare(clock.work(TICK), clock.work(TICK), min_run_time=1000.0, max_pairs=MIN_PAIRS + 2, clock=clock)
    assert len(c.ratios) == MIN_PAIRS + 2


def test_a_maximum_equal_to_the_minimum_is_accepted():
    clock = Clock()
    c = compare(clock.work(TICK), clock.work(TICK), min_run_time=1000.0, min_pairs=MIN_PAIRS,
                max_pairs=MIN_PAIRS, clock=clock)
    assert len(c.ratios) == MIN_PAIRS


def test_each_side_is_measured_for_a_fifth_of_a_second_by_default():
    clock = Clock()
    c = compare(clock.work(TICK * 8), clock.work(TICK * 8), clock=clock)  # 7.8 ms a call
    seconds = sum(c.first.times) * c.first.number_per_run
    assert 0.2 <= seconds < 0.2 + 8 * TICK


@pytest.mark.parametrize("min_pairs", [float(MIN_PAIRS), MIN_PAIRS + 0.5, "12"])
def test_a_minimum_of_pairs_that_is_no_whole_number_is_refused(min_pairs):
    with pytest.raises(ds.TimingError, match="min_pairs must be a whole number"):
        compare(lambda: None, lambda: None, min_pairs=min_pairs)


def test_a_warm_up_time_that_cannot_be_is_refused_before_anything_runs():
    calls = []
    with pytest.raises(ds.TimingError, match="max_warmup_time must be a number of seconds >= 0"):
        compare(lambda: calls.append(1), lambda: calls.append(2), max_warmup_time=-1.0)
    assert calls == []


def test_the_new_comparison_was_one_try():
    clock = Clock()
    assert compare(clock.work(TICK), clock.work(TICK), min_run_time=TICK, clock=clock).tries == 1


# ------------------------------------------------------------------ the warm-up


def _never_settling(clock: Clock):
    """Calls whose times never agree (1, 2, 1, 2, ... ticks) after two quick ones: the warm-up
    cannot settle, and its quickest blocks are long past, so its budget ends it."""
    calls = [0]

    def fn():
        calls[0] += 1
        clock.now += TICK / 2 if calls[0] <= 3 else TICK * (1 + calls[0] % 2)

    return fn


@pytest.mark.parametrize("min_run_time", [0.05, 0.2, 0.5])
def test_an_unsettled_warm_up_stops_after_twice_min_run_time_or_a_quarter_second(min_run_time):
    clock = Clock()
    c = compare(_never_settling(clock), clock.work(TICK), min_run_time=min_run_time, clock=clock)
    budget = max(0.25, 2 * min_run_time)
    assert not c.first.settled and c.second.settled
    assert budget <= c.first.warmup_seconds < budget + 4 * TICK


def test_a_given_warm_up_time_replaces_the_default_budget():
    clock = Clock()
    c = compare(_never_settling(clock), clock.work(TICK), min_run_time=0.2, max_warmup_time=0.05, clock=clock)
    assert not c.first.settled and 0.05 <= c.first.warmup_seconds < 0.05 + 4 * TICK


# ------------------------------------------------------------------ what each side is measured with


def test_the_labels_name_the_two_sides():
    clock = Clock()
    c = compare(clock.work(TICK), clock.work(TICK), min_run_time=TICK, labels=("native", "devshim"), clock=clock)
    assert (c.first.label, c.second.label) == ("native", "devshim")


def test_garbage_collection_is_paused_while_measuring_and_back_on_after():
    clock = Clock()
    seen = []

    def fn():
        seen.append(gc.isenabled())
        clock.now += TICK

    assert gc.isenabled()
    compare(fn, fn, min_run_time=TICK, clock=clock)
    assert gc.isenabled() and seen and not any(seen)


def test_each_run_waits_for_the_device_it_was_given():
    """Functions that only queue work and return nothing: `device=` is what makes each run wait
    for that work, so the ratio is that of the work (2), not of launching it."""
    def launcher(queue, seconds):
        def fn():
            queue.launch(seconds)  # returns nothing to wait on

        return fn

    with fake_queue_backend():
        clock = Clock()
        queue = FakeQueue(clock)
        c = compare(launcher(queue, TICK), launcher(queue, 2 * TICK), min_run_time=16 * TICK, device=queue,
                    clock=clock)
    assert c.ratio == pytest.approx(2.0) and c.first.median == pytest.approx(TICK)


def test_the_device_is_read_by_the_backend_it_was_given_for():
    """`device="meta"` with `backend="torch"` while NumPy is selected: torch's meta device, which
    each side reports as where it ran (NumPy has no meta device)."""
    pytest.importorskip("torch")
    clock = Clock()
    with ds.use_backend("numpy"):
        c = compare(clock.work(TICK), clock.work(TICK), min_run_time=TICK, device="meta", backend="torch",
                    clock=clock)
    assert c.first.device == c.second.device == "meta:0"

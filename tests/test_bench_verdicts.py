"""Verdicts that can be trusted: a comparison on fewer pairs than `MIN_PAIRS` is never confident,
`devshim bench virtual` refuses fewer rounds, and every line under a bench table matches the rows
above it (each mark's line fires exactly when a row carries the mark; "held steady" only over
rows with no mark)."""

from __future__ import annotations

import itertools

import pytest

import devshim as ds
from devshim import cli
from devshim.bench.experiments import experiments
from devshim.bench.table import NOISY_MARK, STALLED_MARK, UNSETTLED_MARK, footnotes, format_table, row_marks
from devshim.timing.compare import MIN_PAIRS, Comparison, compare

HELD_STEADY = "these figures held steady"
MARKS = (NOISY_MARK, UNSETTLED_MARK, STALLED_MARK)


def _steady(runs: int, seconds: float = 1e-3) -> ds.Measurement:
    return ds.Measurement([seconds] * runs, number_per_run=1, settled=True)


# ------------------------------------------------------------------ compare's minimum of pairs


@pytest.mark.parametrize("pairs", [1, 2, 3, MIN_PAIRS - 1])
def test_a_comparison_of_fewer_pairs_than_the_minimum_is_never_confident(pairs):
    """Perfectly steady pairs, a ratio of exactly 2: with too few of them the quartiles say
    nothing (one pair's spread reads 0), so the comparison is not confident all the same."""
    c = Comparison(_steady(pairs), _steady(pairs, 2e-3))
    assert c.ratio == pytest.approx(2.0) and c.spread == 0.0 and not c.noisy and not c.stalled and c.settled
    assert not c.enough_pairs and not c.confident
    assert "confident=False" in repr(c)


def test_a_comparison_of_the_minimum_of_steady_pairs_is_confident():
    c = Comparison(_steady(MIN_PAIRS), _steady(MIN_PAIRS, 2e-3))
    assert c.enough_pairs and c.confident and c.ratio == pytest.approx(2.0)


@pytest.mark.parametrize("min_pairs", [0, 1, 2, 3, MIN_PAIRS - 1, 2.5, True])
def test_compare_refuses_fewer_pairs_than_its_minimum(min_pairs):
    calls = []
    with pytest.raises(ds.TimingError, match=f"min_pairs must be a whole number >= {MIN_PAIRS}"):
        compare(lambda: calls.append(1), lambda: calls.append(2), min_pairs=min_pairs)
    assert calls == []  # refused before anything ran


def test_compare_refuses_a_maximum_below_its_minimum():
    with pytest.raises(ds.TimingError, match="max_pairs .* is below min_pairs"):
        compare(lambda: None, lambda: None, min_pairs=MIN_PAIRS, max_pairs=MIN_PAIRS - 1)


def test_compare_makes_its_minimum_of_pairs_at_least():
    c = compare(lambda: None, lambda: None, min_run_time=1e-6)
    assert len(c.ratios) >= MIN_PAIRS and c.enough_pairs


# ------------------------------------------------------------------ bench virtual --rounds


@pytest.mark.parametrize("rounds", [1, MIN_PAIRS - 1])
def test_bench_virtual_refuses_fewer_rounds_than_the_minimum_of_pairs(rounds, capsys):
    assert cli.main(["bench", "virtual", "--rounds", str(rounds), "--no-progress"]) != 0
    err = capsys.readouterr().err
    assert f"--rounds) must be at least {MIN_PAIRS}, not {rounds}" in err and "MIN_PAIRS" in err
    with pytest.raises(ds.ExperimentError, match=f"at least {MIN_PAIRS}"):
        experiments()["virtual"].run(rounds=rounds)


# ------------------------------------------------------------------ every footnote matches its rows

FLAGS = ("noisy", "settled", "stalled", "busy")


def _row(noisy: bool, unsettled: bool, stalled: bool, busy: bool) -> dict:
    return {"backend": "numpy", "device": "cpu:0", "n": 64, "seconds": 1e-3, "seconds_iqr": 1e-5,
            "noisy": noisy, "settled": not unsettled, "stalled": stalled, "busy": busy, "threads": 1}


ONE_ROW = [_row(*flags) for flags in itertools.product((False, True), repeat=4)]


@pytest.mark.parametrize("rows", [[a, b] for a in ONE_ROW for b in ONE_ROW[::3]] + [[r] for r in ONE_ROW])
def test_every_footnote_matches_the_rows_above_it(rows):
    """Two rows with every combination of marks (and a busy machine or not): each mark's line is
    there exactly when a row carries that mark, and the busy line says "held steady" only over
    rows none of which is marked."""
    lines = footnotes(rows)
    shown = {mark for row in rows for mark in row_marks(row)}
    for mark in MARKS:
        said = [line for line in lines if line.startswith(f"{mark} ")]
        assert len(said) == (1 if mark in shown else 0), (mark, shown, lines)
    busy_lines = [line for line in lines if line.startswith("The machine was busy")]
    stalled = any(row["stalled"] for row in rows)
    assert len(busy_lines) == (1 if any(row["busy"] for row in rows) and not stalled else 0)
    for line in busy_lines:
        assert (HELD_STEADY in line) == (not shown), (line, shown)
        for mark in MARKS:  # a mark the busy line names is one a row carries
            assert (f"marked {mark}" in line or f"or {mark} " in line) <= (mark in shown)
    assert len(lines) == len(shown) + len(busy_lines)


@pytest.mark.parametrize("mark, flag", [(NOISY_MARK, "noisy"), (UNSETTLED_MARK, "settled"), (STALLED_MARK, "stalled")])
def test_each_mark_fires_on_its_row_and_stays_quiet_on_the_others(mark, flag):
    quiet = _row(False, False, False, False)
    marked = dict(quiet, **{flag: flag != "settled"})
    table = format_table(experiments()["matmul"], [quiet, marked]).splitlines()
    assert table[2].startswith(f"| {' ' * len(mark)} numpy") and table[3].startswith(f"| {mark} numpy")
    assert [line[:2] for line in table[4:]] == [f"{mark} "]
    assert format_table(experiments()["matmul"], [quiet, quiet]).splitlines()[4:] == []


def test_a_busy_machine_over_noisy_rows_does_not_say_they_held_steady():
    """The issue's case: busy, no row stalled, one row noisy. The line says the noisy row may owe
    its mark to the busy machine, and that the unmarked row held steady."""
    rows = [_row(False, False, False, True), _row(True, False, False, True)]
    lines = format_table(experiments()["matmul"], rows).splitlines()[4:]
    assert lines[0].startswith(f"{NOISY_MARK} runs disagree")
    assert lines[1].startswith("The machine was busy") and HELD_STEADY not in lines[1]
    assert f"the rows marked {NOISY_MARK} may owe their marks to it" in lines[1]
    assert "The unmarked rows held steady." in lines[1]
    every_row_marked = [_row(True, False, False, True), _row(False, True, False, True)]
    busy = footnotes(every_row_marked)[-1]
    assert f"marked {NOISY_MARK} or {UNSETTLED_MARK} may owe" in busy and "unmarked" not in busy
    assert footnotes([_row(False, False, False, True)]) == [
        "The machine was busy (its load average was above its CPU count while measuring), but no row's runs "
        "stalled: these figures held steady."]

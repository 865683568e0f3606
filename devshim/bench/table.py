"""Rows as an aligned text table (Markdown-compatible), each time with its spread."""

from __future__ import annotations

import math
from typing import Any

from devshim.timing import format_seconds
from devshim.timing.settle import NOISE_SHARE, SETTLE_BLOCKS, SETTLE_RATIO, STALL_SHARE, STALLED_RUNS

__all__ = ["format_table", "format_value", "format_spread", "footnotes", "row_marks", "table_rows",
           "omitted_lines", "NOISY_MARK", "UNSETTLED_MARK", "STALLED_MARK"]

#: Marks before a row whose runs disagree, one whose warm-up never settled, and one whose runs
#: jumped between states (stalled: the machine held the work up).
NOISY_MARK, UNSETTLED_MARK, STALLED_MARK = "*", "+", "~"
#: Each mark, whether a row carries it, and its plain words (`devshim selftest`'s highlights).
_MARKS = ((NOISY_MARK, lambda row: row.get("noisy"), "runs disagree"),
          (UNSETTLED_MARK, lambda row: row.get("settled") is False, "warm-up did not settle"),
          (STALLED_MARK, lambda row: row.get("stalled"), "its runs stalled"))


def format_spread(iqr: float, median: float) -> str:
    """Half the IQR as a share of the median, "±x%", rounded up (one decimal below 10%), so a
    row shown at "±5.0%" or less never has runs that disagree (above ±5%).

    Example:
        >>> format_spread(3.6e-05, 0.0012)
        '±1.5%'
    """
    half = 100 * iqr / median / 2
    if half < 10:
        return f"±{math.ceil(round(half * 10, 6)) / 10:.1f}%"
    return f"±{math.ceil(round(half, 6)):.0f}%"


def format_value(column: Any, row: dict) -> str:
    """One cell: seconds with their spread ("1.2 ms ±1.5%"), ratios as "1.23x", numbers to 3 digits.

    Example:
        >>> format_value(Column("seconds", "time", form="seconds"), {"seconds": 0.0012, "seconds_iqr": 3.6e-05})
        '1.2 ms ±1.5%'
    """
    value = row.get(column.key)
    if value is None or value == "":
        return "-"
    if column.form == "seconds":
        text = format_seconds(value)
        iqr = row.get(f"{column.key.removesuffix('_seconds')}_iqr")  # seconds_iqr; native_seconds: native_iqr
        if row.get("runs") == 1:
            text += " (1 run)"  # one run has no spread to show: ±0% would claim one
        elif iqr is not None and value > 0:
            text += " " + format_spread(iqr, value)
        return text
    if column.form == "ratio":
        return f"{value:.2f}x"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def row_marks(row: dict) -> str:
    """The marks of one row, as the table shows them before its first cell ("" for none).

    Example:
        >>> row_marks({"noisy": True, "stalled": True})
        '*~'
    """
    return "".join(mark for mark, carried, _ in _MARKS if carried(row))


def table_rows(rows: list) -> list:
    """The rows a table or plot shows: all but those an experiment left out (`"omitted"`).

    Example:
        >>> table_rows([{"omitted": "no device here"}, {"seconds": 1.0}])
        [{'seconds': 1.0}]
    """
    return [row for row in rows if "omitted" not in row]


def omitted_lines(rows: list) -> list:
    """One line per distinct reason an experiment left rows out (its `"omitted"` entries).

    Example:
        >>> omitted_lines([{"omitted": "no device here: left out"}])
        ['no device here: left out']
    """
    return list(dict.fromkeys(row["omitted"] for row in rows if "omitted" in row))


def footnotes(rows: list) -> list:
    """The lines under a table that explain its marks, each readable on its own and saying what
    to do; none when no row is marked and the machine was quiet. Each line names a mark only
    when a row above carries it. Where the machine was busy (its load average above its CPU
    count) and no row stalled, one line says so: that these figures held steady when no row is
    marked at all, and otherwise that the marked rows may owe their marks to it.

    Example:
        >>> footnotes([{"noisy": True}])
        ['* runs disagree: the middle half of the runs spread over more than ±5% of the median ...']
    """
    lines = []
    if any(row.get("noisy") for row in rows):
        lines.append(
            f"{NOISY_MARK} runs disagree: the middle half of the runs spread over more than "
            f"±{NOISE_SHARE * 50:g}% of the median (the ± after each time is that spread; for a ratio, "
            f"the spread of the per-pair ratios), even after measuring again. The machine was busy or "
            f"the work varies: measure again before trusting these rows.")
    if any(row.get("settled") is False for row in rows):
        lines.append(
            f"{UNSETTLED_MARK} warm-up did not settle: {SETTLE_BLOCKS} blocks of calls in a row never "
            f"agreed within {SETTLE_RATIO:g}x before the warm-up time ran out, so these rows may "
            f"still hold warm-up (a first compilation, a cold cache) or a busy machine.")
    stalled = [row for row in rows if row.get("stalled")]
    if stalled:
        lines.append(_stalled_line(stalled))
    elif any(row.get("busy") for row in rows):
        lines.append(_busy_line(rows))
    return lines


def _stalled_line(stalled: list) -> str:
    threaded = sorted({row["threads"] for row in stalled if (row.get("threads") or 0) > 1})
    advice = (f"with --threads 1 (these rows ran on {', '.join(map(str, threaded))} threads, which wait "
              f"for each other) or when the machine is quieter (see uptime)"
              if threaded else "when the machine is quieter (see uptime)")
    return (f"{STALLED_MARK} runs stalled: in {STALLED_RUNS:.0%} of the runs or more this process waited "
            f"for a CPU for {STALL_SHARE:.0%} of the run or longer (another process held it, or a "
            f"framework's threads waited for each other), or the run took over {SETTLE_RATIO:g}x the "
            f"fastest, so these figures may be several times too slow: measure again {advice}.")


def _busy_line(rows: list) -> str:
    """The busy machine's line where no row stalled: "held steady" only over rows with no mark."""
    busy = "The machine was busy (its load average was above its CPU count while measuring), but no row's runs stalled"
    marks = sorted({mark for row in rows for mark in row_marks(row)})
    if not marks:
        return f"{busy}: these figures held steady."
    unmarked = " The unmarked rows held steady." if any(not row_marks(row) for row in rows) else ""
    return (f"{busy}; the rows marked {' or '.join(marks)} may owe their marks to it: measure those again when "
            f"the machine is quieter (see uptime).{unmarked}")


def format_table(experiment: Any, rows: list) -> str:
    """The rows of `experiment` as a table; columns with no value in any row are left out.

    Times read "median ±half the IQR as a share of the median". Rows whose
    runs disagree even after re-measuring are marked `*`, rows whose
    warm-up never settled `+`, rows whose runs stalled `~`; the lines
    under the table say what each mark means and what to do, and which rows
    the experiment left out (`"omitted"` entries) and why.

    Example:
        >>> print(format_table(EXPERIMENT, rows))
    """
    left_out = omitted_lines(rows)
    rows = table_rows(rows)
    if not rows:
        return "\n".join(left_out)
    columns = [c for c in experiment.columns if any(r.get(c.key) not in (None, "") for r in rows)]
    cells = [[format_value(c, r) for c in columns] for r in rows]
    marks = [row_marks(r) for r in rows]
    width = max(len(m) for m in marks) if marks else 0
    headings = [c.heading for c in columns]
    if width and columns:
        for cell_row, mark in zip(cells, marks):
            cell_row[0] = mark.ljust(width) + " " + cell_row[0]
        headings[0] = " " * (width + 1) + headings[0]
    widths = [max([len(h)] + [len(line[i]) for line in cells]) for i, h in enumerate(headings)]
    numeric = [c.form != "text" for c in columns]

    def line(values) -> str:
        return "| " + " | ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)
        ) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if num else ("-" * (w + 2))
                          for w, num in zip(widths, numeric)) + "|"
    explained = [experiment.footnote] if getattr(experiment, "footnote", "") else []  # what the columns are
    return "\n".join([line(headings), rule] + [line(c) for c in cells] + explained + footnotes(rows) + left_out)

"""Rows as an aligned text table (Markdown-compatible), each time with its spread."""

from __future__ import annotations

from devshim.bench.measure import NOISE_SHARE
from devshim.timing import format_seconds

__all__ = ["format_table", "format_value"]


def format_value(column, row: dict) -> str:
    """One cell: seconds with their spread ("1.2 ms ±3%"), ratios as "1.23x", numbers to 3 digits.

    Example:
        >>> format_value(Column("seconds", "time", form="seconds"), {"seconds": 0.0012, "seconds_iqr": 3.6e-05})
        '1.2 ms ±3%'
    """
    value = row.get(column.key)
    if value is None or value == "":
        return "-"
    if column.form == "seconds":
        text = format_seconds(value)
        iqr = row.get(_iqr_key(column.key))
        if iqr is not None and value > 0:
            text += f" ±{100 * iqr / value / 2:.0f}%"
        return text
    if column.form == "ratio":
        return f"{value:.2f}x"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def _iqr_key(key: str) -> str:
    # "seconds" -> "seconds_iqr"; "native_seconds" -> "native_iqr"
    return f"{key[:-len('_seconds')]}_iqr" if key.endswith("_seconds") else f"{key}_iqr"


def format_table(experiment, rows: list) -> str:
    """The rows of ``experiment`` as a table; columns with no value in any row are left out.

    Times read "median ±half the IQR as a share of the median". Rows whose
    spread stayed above the noise threshold after re-measuring are marked
    with ``*`` and explained under the table.

    Example:
        >>> print(format_table(EXPERIMENT, rows))
    """
    columns = [c for c in experiment.columns if any(r.get(c.key) not in (None, "") for r in rows)]
    cells = [[format_value(c, r) for c in columns] for r in rows]
    noisy = [bool(r.get("noisy")) for r in rows]
    if any(noisy) and columns:
        for line, flagged in zip(cells, noisy):
            line[0] = ("* " if flagged else "  ") + line[0]
    headings = [c.heading for c in columns]
    if any(noisy) and columns:
        headings[0] = "  " + headings[0]
    widths = [max([len(h)] + [len(line[i]) for line in cells]) for i, h in enumerate(headings)]
    numeric = [c.form != "text" for c in columns]

    def line(values) -> str:
        return "| " + " | ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)
        ) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if num else ("-" * (w + 2))
                          for w, num in zip(widths, numeric)) + "|"
    text = [line(headings), rule] + [line(c) for c in cells]
    if any(noisy):
        text.append(f"* spread above {NOISE_SHARE:.0%} of the median (IQR; shown as ±{NOISE_SHARE / 2:.0%}) "
                    f"even after re-measuring: the machine was busy; measure again before trusting it.")
    return "\n".join(text)

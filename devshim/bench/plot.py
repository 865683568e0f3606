"""Plots of experiment rows, drawn from each experiment's plot declaration (needs matplotlib).

A plot carries the table's marks: a marked point or bar is drawn hollow and in another colour,
its label starts with the marks (`*`, `+`, `~`), and the table's footnotes, saying what
each mark means and what to do, are printed under the axes; so are the lines naming rows the
experiment left out."""

from __future__ import annotations

import textwrap

from devshim.bench.experiment import BarPlot, LinePlot
from devshim.bench.table import footnotes, omitted_lines, row_marks, table_rows
from devshim.errors import BenchUsageError, PlotUnavailableError

__all__ = ["require_matplotlib", "check_plot_path", "plot"]


def require_matplotlib() -> None:
    """Raise PlotUnavailableError, saying how to install it, when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError:
        raise PlotUnavailableError(
            '--plot needs matplotlib, which is not installed. Install it with pip install matplotlib '
            '(or pip install "devshim[plot]" where devshim is installed), or leave out --plot.'
        ) from None


def check_plot_path(path: str) -> None:
    """Fail now, before any measurement, when matplotlib cannot write `path`'s format."""
    require_matplotlib()
    from matplotlib.figure import Figure

    formats = Figure().canvas.get_supported_filetypes()
    suffix = path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    if suffix not in formats:
        raise BenchUsageError(
            f"--plot {path}: matplotlib cannot tell the image format from "
            f"{'.' + suffix if suffix else 'a name without an extension'}. End the name with one of "
            f"{', '.join('.' + f for f in sorted(formats))}, e.g. {path.rsplit('.', 1)[0]}.png."
        )


def _bars(rows: list, key: str, scale: float) -> tuple:
    """(values, [below, above]) for error bars from `<key>_low`/`<key>_high` or the quartiles."""
    values = [row[key] * scale for row in rows]
    bounds = [_quartile_bounds(row, key) for row in rows]
    below = [max(value - low * scale, 0.0) if low is not None else 0.0 for value, (low, _) in zip(values, bounds)]
    above = [max(high * scale - value, 0.0) if high is not None else 0.0 for value, (_, high) in zip(values, bounds)]
    return values, [below, above]


def _quartile_bounds(row: dict, key: str) -> tuple:
    """(low, high) of `key`'s error bar: `<key>_low`/`<key>_high` where the row has them, else its
    quartiles `<key>_q1`/`<key>_q3`; None for a bound the row lacks."""
    low, high = ("_low", "_high") if f"{key}_low" in row else ("_q1", "_q3")
    return row.get(key + low), row.get(key + high)


#: Colours of unmarked and marked points and bars.
_PLAIN, _MARKED = "tab:blue", "tab:red"


def _line_plot(ax, spec: LinePlot, rows: list) -> None:
    groups: dict = {}
    for row in rows:
        groups.setdefault(" ".join(str(row[k]) for k in spec.group), []).append(row)
    for name, members in groups.items():
        members = sorted(members, key=lambda r: r[spec.x])
        values, errors = _bars(members, spec.y, 1.0)
        xs = [r[spec.x] for r in members]
        ax.errorbar(xs, values, yerr=errors, marker="o", capsize=3, label=name)
        for x, y, row in zip(xs, values, members):
            marks = row_marks(row)
            if marks:  # hollow, in the marked colour, with the table's marks beside it
                ax.plot([x], [y], marker="o", markersize=11, markerfacecolor="none",
                        markeredgecolor=_MARKED, linestyle="none")
                ax.annotate(marks, (x, y), textcoords="offset points", xytext=(6, 6), color=_MARKED,
                            fontsize=11, fontweight="bold")
    ax.set_xscale("log", base=2)
    ticks = sorted({r[spec.x] for r in rows})
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel(spec.xlabel)
    ax.set_ylabel(spec.ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()


def _bar_plot(ax, spec: BarPlot, rows: list) -> None:
    usable = [r for r in rows if r.get(spec.value) is not None]
    labels = [f"{r['backend']}: {r[spec.label]}" if "backend" in r else str(r[spec.label]) for r in usable]
    marks = [row_marks(r) for r in usable]
    labels = [f"{m} {label}" if m else label for m, label in zip(marks, labels)]
    values, errors = _bars(usable, spec.value, spec.scale)
    bars = ax.barh(range(len(values)), values, xerr=errors, capsize=3,
                   color=[_MARKED if m else _PLAIN for m in marks])
    ax.set_yticks(range(len(values)), labels)
    for bar, tick, m in zip(bars, ax.get_yticklabels(), marks):
        if m:  # hatched, faded, its label in the marked colour
            bar.set_hatch("//")
            bar.set_alpha(0.6)
            tick.set_color(_MARKED)
    ax.invert_yaxis()
    if spec.reference is not None:
        ax.axvline(spec.reference, color="black", linewidth=0.8)
    ax.set_xlabel(spec.xlabel)
    if spec.annotate is not None:
        ax.bar_label(bars, padding=3, labels=[spec.annotate(r) for r in usable])
        ax.margins(x=0.35)  # room for the labels


def plot(experiment, rows: list, path: str, title: str = "") -> None:
    """Draw an experiment's rows to an image file (format by its name), with IQR error bars,
    the table's marks on marked points and bars, and its footnotes under the axes.

    Example:
        >>> plot(experiments()["matmul"], rows, "matmul.png")
    """
    require_matplotlib()
    from matplotlib.figure import Figure

    shown = table_rows(rows)
    notes = [textwrap.fill(line, 120) for line in footnotes(shown) + omitted_lines(rows)]
    height = 4.2 + 0.17 * sum(note.count("\n") + 1 for note in notes)
    fig = Figure(figsize=(7.5, height), layout="constrained")
    ax = fig.subplots()
    spec = experiment.plot
    if isinstance(spec, LinePlot):
        _line_plot(ax, spec, shown)
    elif isinstance(spec, BarPlot):
        _bar_plot(ax, spec, shown)
    if not shown:
        ax.text(0.5, 0.5, "no rows to plot", ha="center", va="center", transform=ax.transAxes)
    ax.set_title(title or f"devshim bench {experiment.name}")
    if notes:  # the table's footnotes, under the axes (constrained layout makes room)
        fig.supxlabel("\n".join(notes), x=0.01, ha="left", fontsize=7)
    fig.savefig(path, dpi=110)

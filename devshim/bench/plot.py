"""Plots of experiment rows, drawn from each experiment's plot declaration (needs matplotlib)."""

from __future__ import annotations

from devshim.bench.experiment import BarPlot, LinePlot
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
    """Fail now, before any measurement, when matplotlib cannot write ``path``'s format."""
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
    """(values, [below, above]) for error bars from ``<key>_low``/``<key>_high`` or the quartiles."""
    values, below, above = [], [], []
    for row in rows:
        value = row[key] * scale
        low, high = _quartile_bounds(row, key)
        values.append(value)
        below.append(max(value - low * scale, 0.0) if low is not None else 0.0)
        above.append(max(high * scale - value, 0.0) if high is not None else 0.0)
    return values, [below, above]


def _quartile_bounds(row: dict, key: str) -> tuple:
    if f"{key}_low" in row:
        return row.get(f"{key}_low"), row.get(f"{key}_high")
    if f"{key}_q1" in row:
        return row.get(f"{key}_q1"), row.get(f"{key}_q3")
    return None, None


def plot(experiment, rows: list, path: str, title: str = "") -> None:
    """Draw an experiment's rows to an image file (format by its name), with IQR error bars.

    Example:
        >>> plot(experiments()["matmul"], rows, "matmul.png")
    """
    require_matplotlib()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2), layout="constrained")
    ax = fig.subplots()
    spec = experiment.plot
    if isinstance(spec, LinePlot):
        groups: dict = {}
        for row in rows:
            groups.setdefault(" ".join(str(row[k]) for k in spec.group), []).append(row)
        for name, members in groups.items():
            members = sorted(members, key=lambda r: r[spec.x])
            values, errors = _bars(members, spec.y, 1.0)
            ax.errorbar([r[spec.x] for r in members], values, yerr=errors, marker="o", capsize=3, label=name)
        ax.set_xscale("log", base=2)
        ticks = sorted({r[spec.x] for r in rows})
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel(spec.xlabel)
        ax.set_ylabel(spec.ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    elif isinstance(spec, BarPlot):
        usable = [r for r in rows if r.get(spec.value) is not None]
        labels = [f"{r['backend']}: {r[spec.label]}" if "backend" in r else str(r[spec.label]) for r in usable]
        values, errors = _bars(usable, spec.value, spec.scale)
        bars = ax.barh(range(len(values)), values, xerr=errors, capsize=3, color="tab:blue")
        ax.set_yticks(range(len(values)), labels)
        ax.invert_yaxis()
        if spec.reference is not None:
            ax.axvline(spec.reference, color="black", linewidth=0.8)
        ax.set_xlabel(spec.xlabel)
        if spec.annotate is not None:
            ax.bar_label(bars, padding=3, labels=[spec.annotate(r) for r in usable])
            ax.margins(x=0.35)  # room for the labels
    ax.set_title(title or f"devshim bench {experiment.name}")
    fig.savefig(path, dpi=110)

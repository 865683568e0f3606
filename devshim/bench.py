"""``devshim bench``: run an experiment, print a table, save JSON, draw a plot.

    devshim bench matmul|logging|parallel|transfer|overhead
        [--backend B|all] [--device D ...] [--sizes N ...] [--steps N]
        [--min-run-time S] [--json FILE] [--plot FILE.png] [--no-progress]

A progress bar goes to stderr (tqdm when installed, plain lines otherwise),
the table to stdout. Plots need matplotlib: ``pip install "devshim[plot]"``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from devshim import config
from devshim.errors import DevshimError

EXPERIMENT_NAMES = ("matmul", "logging", "parallel", "transfer", "overhead")

# Columns shown in the table, in order, with their headings. JSON keeps every key.
COLUMNS: Dict[str, List[tuple]] = {
    "matmul": [("backend", "backend"), ("device", "device"), ("size", "n"), ("seconds", "time"),
               ("gflops", "GFLOP/s"), ("cpu_over_device", "CPU/device")],
    "logging": [("backend", "backend"), ("device", "device"), ("variant", "variant"), ("steps", "steps"),
                ("seconds", "time"), ("host_reads", "host reads"), ("slowdown", "slowdown")],
    "parallel": [("backend", "backend"), ("variant", "variant"), ("devices", "devices"),
                 ("seconds", "time"), ("speedup", "speedup"), ("note", "note")],
    "transfer": [("backend", "backend"), ("direction", "direction"), ("device", "device"),
                 ("megabytes", "MiB"), ("seconds", "time"), ("gb_per_s", "GB/s")],
    "overhead": [("backend", "backend"), ("device", "device"), ("operation", "operation"),
                 ("native_seconds", "native"), ("devshim_seconds", "devshim"), ("ratio", "devshim/native")],
}
_RATIOS = ("cpu_over_device", "slowdown", "speedup", "ratio")


class BenchUsageError(DevshimError, ValueError):
    """Command-line options that do not fit the chosen experiment."""


class PlotUnavailableError(DevshimError, RuntimeError):
    """``--plot`` was asked for but matplotlib is not installed."""


# ----------------------------------------------------------------- arguments


def register(commands: "argparse._SubParsersAction") -> None:
    """Add the ``bench`` subcommand to the ``devshim`` parser."""
    parser = commands.add_parser(
        "bench", help="time the D2L GPU experiments (matmul, logging, parallel, transfer, overhead)",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("experiment", choices=EXPERIMENT_NAMES)
    parser.add_argument("--backend", metavar="B",
                        help="framework to run on (default: devshim's selected backend); "
                             "'all' runs every installed backend")
    parser.add_argument("--device", metavar="D", action="append",
                        help="device spec such as cpu, gpu:1 (repeat for parallel's two devices; "
                             "matmul always adds the CPU as its reference)")
    parser.add_argument("--sizes", metavar="N", type=float, nargs="+",
                        help="matmul/logging/parallel: matrix sizes; transfer: buffer sizes in MiB")
    parser.add_argument("--steps", metavar="N", type=int,
                        help="logging: steps (default 1000); parallel: matmuls per stream (default 10)")
    parser.add_argument("--min-run-time", metavar="S", type=float,
                        help="seconds each measurement runs for at least")
    parser.add_argument("--json", metavar="FILE", help="write the rows and the setup as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help='draw a plot (needs pip install "devshim[plot]")')
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.set_defaults(run=run)


def _one_size(sizes: Optional[List[float]], experiment: str) -> Dict[str, Any]:
    if sizes is None:
        return {}
    if len(sizes) != 1:
        raise BenchUsageError(f"{experiment} takes one matrix size (--sizes N), not {len(sizes)}.")
    return {"size": _whole(sizes[0], experiment)}


def _whole(value: float, experiment: str) -> int:
    if value != int(value):
        raise BenchUsageError(f"{experiment} needs whole matrix sizes; got {value:g}. Try --sizes {int(value)}.")
    return int(value)


def experiment_kwargs(args: argparse.Namespace) -> Dict[str, Any]:
    """The keyword arguments the chosen experiment function gets from the command line."""
    name, kwargs = args.experiment, {}
    if args.min_run_time is not None:
        kwargs["min_run_time"] = args.min_run_time
    devices = args.device
    if name == "matmul":
        if args.sizes:
            kwargs["sizes"] = [_whole(s, name) for s in args.sizes]
        if devices:
            kwargs["devices"] = devices
    elif name == "logging":
        kwargs.update(_one_size(args.sizes, name))
        if args.steps is not None:
            kwargs["steps"] = args.steps
    elif name == "parallel":
        kwargs.update(_one_size(args.sizes, name))
        if args.steps is not None:
            kwargs["repeats"] = args.steps
        if devices:
            kwargs["devices"] = devices
    elif name == "transfer":
        if args.sizes:
            kwargs["sizes_mb"] = list(args.sizes)
    elif name == "overhead" and args.sizes:
        raise BenchUsageError("overhead has fixed cases and takes no --sizes; leave it out.")
    if name in ("logging", "transfer", "overhead") and devices:
        if len(devices) > 1:
            raise BenchUsageError(f"{name} runs on one device; give --device once.")
        kwargs["device"] = devices[0]
    if name != "logging" and name != "parallel" and args.steps is not None:
        raise BenchUsageError(f"--steps applies to logging and parallel, not {name}.")
    return kwargs


# ----------------------------------------------------------------- progress


class _LineProgress:
    """Progress as plain lines on stderr, for when tqdm is not installed."""

    def __init__(self, title: str) -> None:
        self.title = title

    def __call__(self, done: int, total: int, label: str) -> None:
        print(f"{self.title}: [{done}/{total}] {label}", file=sys.stderr, flush=True)

    def close(self) -> None:
        pass


class _TqdmProgress:
    """A tqdm bar, made on the first report, once the number of steps is known."""

    def __init__(self, tqdm: Any, title: str) -> None:
        self.tqdm, self.title, self.bar = tqdm, title, None

    def __call__(self, done: int, total: int, label: str) -> None:
        if self.bar is None:
            self.bar = self.tqdm(total=total, desc=self.title, file=sys.stderr, unit="step")
        self.bar.set_postfix_str(label, refresh=False)
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def make_progress(title: str, enabled: bool = True) -> Optional[Any]:
    """A ``progress(done, total, label)`` callable drawing on stderr, or None."""
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return _LineProgress(title)
    return _TqdmProgress(tqdm, title)


# ----------------------------------------------------------------- output


def _format_seconds(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_value(key: str, value: Any) -> str:
    if value is None or value == "":
        return "-"
    if key.endswith("seconds"):
        return _format_seconds(value)
    if key in _RATIOS:
        return f"{value:.2f}x"
    if isinstance(value, float):
        return f"{value:.3g}" if value < 100 else f"{value:.0f}"
    return str(value)


def format_table(experiment: str, rows: Sequence[Dict[str, Any]]) -> str:
    """The rows as an aligned text table (Markdown-compatible).

    Example:
        >>> print(format_table("matmul", rows))
    """
    columns = [(k, h) for k, h in COLUMNS[experiment] if any(r.get(k) not in (None, "") for r in rows)]
    cells = [[format_value(k, r.get(k)) for k, _ in columns] for r in rows]
    headings = [h for _, h in columns]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headings)]
    numeric = [all(_is_number(r.get(k)) for r in rows) for k, _ in columns]

    def line(values: Sequence[str]) -> str:
        return "| " + " | ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)
        ) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if num else ("-" * (w + 2))
                          for w, num in zip(widths, numeric)) + "|"
    return "\n".join([line(headings), rule] + [line(c) for c in cells])


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def setup_info(backends: Sequence[str]) -> Dict[str, Any]:
    """Where the numbers came from: versions, threads, machine."""
    import devshim
    from devshim.backends import get_backend

    info: Dict[str, Any] = {
        "devshim": devshim.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "system": platform.system(),
        "cpu_count": os.cpu_count(),
        "backends": {b: get_backend(b).version() for b in backends},
    }
    if "torch" in backends:
        import torch

        info["torch_threads"] = torch.get_num_threads()
    return info


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError:
        raise PlotUnavailableError(
            '--plot needs matplotlib, which is not installed. Install it with '
            'pip install "devshim[plot]", or leave out --plot.'
        ) from None


def plot(experiment: str, rows: Sequence[Dict[str, Any]], path: str, title: str = "") -> None:
    """Draw the rows of an experiment to an image file (PNG by its name).

    Example:
        >>> plot("matmul", rows, "matmul.png")
    """
    _require_matplotlib()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2), layout="constrained")
    ax = fig.subplots()
    if experiment in ("matmul", "transfer"):
        x_key, y_key, group_keys = (
            ("size", "gflops", ("backend", "device")) if experiment == "matmul"
            else ("megabytes", "gb_per_s", ("backend", "device", "direction"))
        )
        groups: Dict[str, List[Dict[str, Any]]] = {}
        for row in rows:
            groups.setdefault(" ".join(str(row[k]) for k in group_keys), []).append(row)
        for name, members in groups.items():
            members = sorted(members, key=lambda r: r[x_key])
            ax.plot([r[x_key] for r in members], [r[y_key] for r in members], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ticks = sorted({r[x_key] for r in rows})
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("matrix size n (n x n, float32)" if experiment == "matmul" else "buffer size (MiB)")
        ax.set_ylabel("GFLOP/s (median)" if experiment == "matmul" else "GB/s (median)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    else:
        label_key = {"logging": "variant", "parallel": "variant", "overhead": "operation"}[experiment]
        value_key = "ratio" if experiment == "overhead" else "seconds"
        usable = [r for r in rows if r.get(value_key) is not None]
        labels = [f"{r['backend']}: {r[label_key]}" for r in usable]
        values = [r[value_key] * (1 if experiment == "overhead" else 1e3) for r in usable]
        bars = ax.barh(range(len(values)), values, color="tab:blue")
        ax.set_yticks(range(len(values)), labels)
        ax.invert_yaxis()
        if experiment == "overhead":
            ax.axvline(1.0, color="black", linewidth=0.8)
            ax.set_xlabel("devshim time / native time (1 = no overhead)")
        else:
            ax.set_xlabel("milliseconds (median)")
        if experiment == "logging":
            ax.bar_label(bars, padding=3, labels=[
                f"{r['host_reads']} host read{'s' if r['host_reads'] != 1 else ''}" for r in usable])
            ax.margins(x=0.35)  # room for the labels
    ax.set_title(title or f"devshim bench {experiment}")
    fig.savefig(path, dpi=110)


# ----------------------------------------------------------------- command


def all_backends() -> Tuple[List[str], List[str]]:
    """What ``--backend all`` runs: installed backends the experiments know,
    less those that cannot present the virtual devices asked for; and those left out."""
    from devshim.backends import available_backends, virtual_capable_backends
    from devshim.experiments import _OPS_FACTORIES

    names = [b for b in available_backends() if b in _OPS_FACTORIES]
    if not config.virtual_device_count():
        return names, []
    capable = set(virtual_capable_backends())
    return [b for b in names if b in capable], [b for b in names if b not in capable]


def run(args: argparse.Namespace) -> int:
    """Run ``devshim bench`` for parsed arguments; returns the exit status."""
    from devshim import experiments
    from devshim.backends import get_backend

    if args.plot:
        _require_matplotlib()  # fail before the measurements, not after
    kwargs = experiment_kwargs(args)
    if args.backend and args.backend.strip().lower() == "all":
        backends, skipped = all_backends()
        if not backends:
            raise BenchUsageError(
                f"--backend all found no backend to run: {config.VIRTUAL_DEVICES_VAR} is set and none "
                f"of {', '.join(skipped)} has virtual devices. Unset it or name a backend."
            )
        if skipped:
            print(f"{config.VIRTUAL_DEVICES_VAR} is set: skipping {', '.join(skipped)} "
                  f"(no virtual devices)", file=sys.stderr)
    else:
        backends = [get_backend(args.backend).name]
    function: Callable[..., List[Dict[str, Any]]] = experiments.EXPERIMENTS[args.experiment]
    rows: List[Dict[str, Any]] = []
    for backend in backends:
        progress = make_progress(f"{args.experiment} on {backend}", enabled=not args.no_progress)
        try:
            rows.extend(function(backend=backend, progress=progress, **kwargs))
        finally:
            if progress is not None:
                progress.close()
    title = f"devshim bench {args.experiment} ({', '.join(backends)})"
    print(title)
    print(format_table(args.experiment, rows))
    if args.json:
        document = {"experiment": args.experiment, "parameters": kwargs,
                    "setup": setup_info(backends), "rows": rows}
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=2, default=str)
            handle.write("\n")
        print(f"wrote {args.json}")
    if args.plot:
        plot(args.experiment, rows, args.plot, title=title)
        print(f"wrote {args.plot}")
    return 0

"""`devshim bench`: run an experiment, print a table, save JSON, draw a plot.

    devshim bench EXPERIMENT [--backend B[,B...]|all] [--min-run-time S]
                             [--json FILE] [--plot FILE.png] [--no-progress] [experiment options]

The experiments (`devshim bench --help` lists them, `devshim bench
EXPERIMENT --help` shows each one's options) live one per module in
`devshim/bench/experiments/`. A progress bar goes to stderr (tqdm when
installed, plain lines otherwise), the table to stdout. Every time carries
its spread; a measurement too noisy to trust, or whose runs stalled, is
measured again, and marked if it stays so. Two ways of doing one thing are
measured side by side (their runs take turns), as a ratio with its spread.
Experiments run the framework on one CPU thread unless `--threads` says
otherwise. Plots need matplotlib: `pip install matplotlib` (or the `plot` extra).

This package is an application on top of devshim's public API and the
backends' `ops` modules.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys

from devshim import settings
from devshim.backends import get_backend, specs
from devshim.bench.experiments import experiments
from devshim.errors import BenchUsageError

__all__ = ["register", "run", "all_backends", "setup_info", "check_output_path"]


def register(commands) -> None:
    """Add the `bench` command, with one subcommand per experiment, to the `devshim` parser."""
    found = experiments()
    parser = commands.add_parser(
        "bench", help=f"time the D2L GPU experiments ({', '.join(found)})",
        description=(__doc__ or "").split("\n\n")[0],
    )
    sub = parser.add_subparsers(dest="experiment", metavar="EXPERIMENT")
    sub.required = True
    for name, experiment in found.items():
        one = sub.add_parser(name, help=experiment.summary, description=experiment.summary)
        if experiment.per_backend:
            one.add_argument("--backend", metavar="B",
                             help="framework to run on (default: devshim's selected backend), several "
                                  "comma-separated (torch,jax); 'all' runs every installed backend that has "
                                  "an ops module")
        one.add_argument("--min-run-time", metavar="S", type=float,
                         help="seconds each measurement runs for at least")
        one.add_argument("--json", metavar="FILE", help="write the rows and the setup as JSON")
        one.add_argument("--plot", metavar="FILE.png", help="draw a plot (needs matplotlib: pip install matplotlib)")
        one.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
        for option in experiment.options:
            option.add_to(one)
        one.set_defaults(run=run)


def check_output_path(flag: str, path: str) -> None:
    """Fail now, before any measurement, when `path` cannot be written.

    Example:
        >>> check_output_path("--json", "/no/such/folder/rows.json")
        Traceback (most recent call last):
        devshim.errors.BenchUsageError: --json /no/such/folder/rows.json: the folder ...
    """
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise BenchUsageError(f"{flag} {path}: that is a folder; give a file name inside it.")
    if not os.path.isdir(folder):
        raise BenchUsageError(f"{flag} {path}: the folder {folder} does not exist; create it first "
                              f"or write somewhere else.")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise BenchUsageError(f"{flag} {path}: this user may not write there; choose another place.")


def all_backends() -> tuple:
    """What `--backend all` runs: installed backends that have an ops module, less those
    that cannot present the virtual devices asked for; and those left out.

    Example:
        >>> all_backends()
        (['torch', 'numpy'], [])
    """
    names = [n for n, s in specs().items() if s.is_installed() and s.has_module("ops")]
    if not settings.virtual_device_count():
        return names, []
    capable = [n for n in names if specs()[n].virtual_devices]
    return capable, [n for n in names if n not in capable]


def setup_info(backends: list) -> dict:
    """Where the numbers came from: versions, threads, machine.

    Example:
        >>> setup_info(["numpy"])["backends"]
        {'numpy': '2.4.6'}
    """
    import devshim

    info = {
        "devshim": devshim.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "system": platform.system(),
        "cpu_count": os.cpu_count(),
        "backends": {b: get_backend(b).version() for b in backends},
    }
    if "torch" in backends:
        import torch

        # torch's own setting in this process; each row's "threads" is what it was measured on
        info["torch_threads"] = torch.get_num_threads()
    info["load_average"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return info


def _backends_for(args, experiment) -> list:
    if not experiment.per_backend:
        return [None]
    if args.backend and args.backend.strip().lower() == "all":
        backends, skipped = all_backends()
        if not backends:
            raise BenchUsageError(
                f"--backend all found no backend to run: {settings.VIRTUAL_DEVICES_VAR} is set and none "
                f"of {', '.join(skipped)} has virtual devices. Unset it or name a backend."
            )
        if skipped:
            print(f"{settings.VIRTUAL_DEVICES_VAR} is set: skipping {', '.join(skipped)} "
                  f"(no virtual devices)", file=sys.stderr)
        return backends
    names = [name.strip() for name in (args.backend or "").split(",") if name.strip()] or [None]
    return list(dict.fromkeys(get_backend(name).name for name in names))


def _for_backend(keywords: dict, backend) -> dict:
    """The run keywords for one backend: `--threads` only where the framework can be set
    while running (with `--backend all` the others keep their own setting, and say so)."""
    if keywords.get("threads") is None or backend is None:
        return keywords
    from devshim.bench.experiment import ops_for

    if hasattr(ops_for(backend), "set_threads"):
        return keywords
    print(f"--threads: {backend} cannot change its CPU threads while running; its rows use its own "
          f"setting (set OMP_NUM_THREADS before starting, for NumPy's BLAS and MXNet)", file=sys.stderr)
    return {k: v for k, v in keywords.items() if k != "threads"}


def run(args: argparse.Namespace) -> int:
    """Run `devshim bench` for parsed arguments; returns the exit status."""
    from devshim.bench.plot import check_plot_path, plot
    from devshim.bench.progress import make_progress
    from devshim.bench.table import format_table, table_rows

    experiment = experiments()[args.experiment]
    # Everything that can fail without measuring fails before measuring.
    if args.json:
        check_output_path("--json", args.json)
    if args.plot:
        check_output_path("--plot", args.plot)
        check_plot_path(args.plot)
    keywords = experiment.keywords(args)
    if args.min_run_time is not None:
        keywords["min_run_time"] = args.min_run_time
    backends = _backends_for(args, experiment)
    rows: list = []
    for backend in backends:
        title = f"{experiment.name} on {backend}" if backend else experiment.name
        progress = make_progress(title, enabled=not args.no_progress)
        try:
            rows.extend(experiment.run(backend=backend, progress=progress, **_for_backend(keywords, backend)))
        finally:
            if progress is not None:
                progress.close()
    named = [b for b in backends if b]
    title = f"devshim bench {experiment.name}" + (f" ({', '.join(named)})" if named else "")
    print(title)
    print(format_table(experiment, rows))
    if args.json:
        document = {"experiment": experiment.name, "parameters": keywords,
                    "setup": setup_info(named), "rows": table_rows(rows),
                    "omitted": [row for row in rows if "omitted" in row]}
        pathlib.Path(args.json).write_text(json.dumps(document, indent=2, default=str) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    if args.plot:
        plot(experiment, rows, args.plot, title=title)
        print(f"wrote {args.plot}")
    return 0

"""What an experiment of `devshim bench` declares, and the helpers experiments share.

Each experiment is one module in `devshim/bench/experiments/` holding an
`EXPERIMENT`: its name, its command-line options, the columns of its table
and the plot it draws, and the function that measures (returning rows, plain
dicts ready for a table or JSON). The CLI, the table and the plot read these
declarations; nothing lists experiments by name.

Experiments use only devshim's public API and the backends' `ops` modules.
"""

from __future__ import annotations

from typing import Any, Optional

import devshim as ds

from devshim.backends import get_backend, specs
from devshim.errors import ExperimentError

__all__ = [
    "Experiment", "Option", "int_option", "Column", "LinePlot", "BarPlot", "run_steps",
    "Steps", "HostReads", "ops_for", "backend_ops", "device_name", "native_device", "check_sizes", "check_count",
]


class Option:
    """One command-line option of an experiment; `dest` is the keyword its run function takes.

    Example:
        >>> Option("--steps", dest="steps", type=int, metavar="N", help="steps to log")
    """

    def __init__(self, flag: str, *, dest: str, help: str, type=None, nargs=None, action=None,
                 metavar=None) -> None:
        self.flag, self.dest, self.help = flag, dest, help
        self.type, self.nargs, self.action, self.metavar = type, nargs, action, metavar

    def add_to(self, parser) -> None:
        given = {"type": self.type, "nargs": self.nargs, "metavar": self.metavar}
        extra = {name: value for name, value in given.items() if value is not None}
        parser.add_argument(self.flag, dest=self.dest, action=self.action or "store", help=self.help, **extra)


def int_option(flag: str, help: str) -> Option:
    """An option taking one whole number, N; its `dest` is the flag's name (`--batch-size`: batch_size).

    Example:
        >>> int_option("--steps", "steps to log (default 1000)").dest
        'steps'
    """
    return Option(flag, dest=flag[2:].replace("-", "_"), type=int, metavar="N", help=help)


class Column:
    """One column of an experiment's table.

    `form` is how values print: `"text"`, `"number"`, `"seconds"`
    (with the row's spread, `<key>_iqr`, as "±x%") or `"ratio"` ("1.23x").

    Example:
        >>> Column("seconds", "time", form="seconds")
    """

    def __init__(self, key: str, heading: str, *, form: str = "text") -> None:
        self.key, self.heading, self.form = key, heading, form


class LinePlot:
    """A line per group of rows, `y` against `x` on a log2 axis, with error bars
    from the rows' `<y>_low`/`<y>_high` (the measurement's quartiles).

    Example:
        >>> LinePlot(x="size", y="gflops", group=("backend", "device"),
        ...          xlabel="matrix size n", ylabel="GFLOP/s (median)")
    """

    def __init__(self, *, x: str, y: str, group: tuple, xlabel: str, ylabel: str) -> None:
        self.x, self.y, self.group, self.xlabel, self.ylabel = x, y, group, xlabel, ylabel


class BarPlot:
    """A horizontal bar per row, `value` scaled by `scale`, with error bars from
    `<value>_low`/`<value>_high`; `reference` draws a vertical line (1.0 for ratios);
    `annotate(row)` writes a label at the end of each bar.

    Example:
        >>> BarPlot(label="variant", value="seconds", scale=1e3, xlabel="milliseconds (median)")
    """

    def __init__(self, *, label: str, value: str, xlabel: str, scale: float = 1.0,
                 reference=None, annotate=None) -> None:
        self.label, self.value, self.xlabel, self.scale = label, value, xlabel, scale
        self.reference, self.annotate = reference, annotate


class Experiment:
    """An experiment's declaration; `run(backend=..., progress=..., min_run_time=..., **options)`
    measures and returns the rows.

    Example:
        >>> EXPERIMENT = Experiment("matmul", summary="...", run=run, options=[...],
        ...                         columns=[...], plot=LinePlot(...))
    """

    def __init__(self, name: str, *, summary: str, run, options: list, columns: list, plot,
                 per_backend: bool = True, framework: Optional[str] = None, footnote: str = "") -> None:
        self.name, self.summary, self.run = name, summary, run
        self.options, self.columns, self.plot = options, columns, plot
        #: False for experiments that do not depend on the backend (`startup`): run once.
        self.per_backend = per_backend
        #: The one backend an experiment that runs once measures (`virtual`: torch's virtual
        #: GPUs), or None: what tools/gpu_check.py's --backends leaves out when it is not named.
        self.framework = framework
        #: What the table's columns are, printed under it ("" for none).
        self.footnote = footnote

    def keywords(self, args) -> dict:
        """The run function's keywords from parsed command-line arguments (those given)."""
        given = {option.dest: getattr(args, option.dest, None) for option in self.options}
        return {dest: value for dest, value in given.items() if value is not None}


# ---------------------------------------------------------------- shared helpers


def ops_for(backend):
    """The backend's `ops` module (its framework is imported now).

    Example:
        >>> ops = ops_for("torch")
        >>> ops.matmul(ops.rand((4, 4), ds.cpu()), ops.rand((4, 4), ds.cpu()))
    """
    adapter = get_backend(backend)
    spec = specs()[adapter.name]
    if not spec.has_module("ops"):
        raise ExperimentError(
            f"The {adapter.name} backend has no ops module, so the experiments cannot run on it; "
            f"run them with --backend set to one of: "
            f"{', '.join(n for n in ds.available_backends() if specs()[n].has_module('ops'))}."
        )
    return spec.module("ops")


def backend_ops(backend) -> tuple:
    """(adapter, name, ops module) of a backend (None: devshim's selected one), its framework imported.

    Example:
        >>> adapter, name, ops = backend_ops("torch")
        >>> name, ops.matmul(ops.rand((4, 4), adapter.cpu()), ops.rand((4, 4), adapter.cpu())).shape
        ('torch', torch.Size([4, 4]))
    """
    adapter = get_backend(backend)
    return adapter, adapter.name, ops_for(adapter.name)


def native_device(device, backend: str):
    """The backend's native device for a spec."""
    return ds.device(device, backend=backend)


def device_name(native, backend: str) -> str:
    """"gpu:1", or "gpu:1 (virtual)" for a virtual device."""
    described = get_backend(backend).describe(native)
    return f"{described} (virtual)" if described.virtual else str(described)


def check_sizes(sizes, what: str) -> list:
    sizes = list(sizes) if isinstance(sizes, (list, tuple)) else [sizes]
    if not sizes or any(not isinstance(s, (int, float)) or isinstance(s, bool) or s <= 0 for s in sizes):
        raise ExperimentError(f"{what} must be a non-empty list of positive numbers, not {sizes!r}.")
    return sizes


def check_count(value, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ExperimentError(f"{what} must be a whole number >= 1, not {value!r}.")
    return value


def run_steps(count: int, fn, *args):
    """Call `fn(*args)` `count` times in a row; the last output (None for none), so that a wait
    on it covers them all.

    Example:
        >>> run_steps(10, ops.matmul, a, b)   # ten matmuls, the last one's product
    """
    out = None
    for _ in range(count):
        out = fn(*args)
    return out


class HostReads:
    """The one door through which experiments read device values on the host.

    Every read is an explicit `ds.to_numpy` and is counted, so a transfer
    guard (or a test) can watch or wrap `read` to see each one.

    Example:
        >>> reads = HostReads()
        >>> value = float(reads.read(loss))
        >>> reads.count
        1
    """

    def __init__(self) -> None:
        self.count = 0

    def read(self, x: Any) -> Any:
        self.count += 1
        return ds.to_numpy(x)


class Steps:
    """Runs labelled steps, `step(*args)`, reporting `progress(done, total, label)` before the
    first and after each; `run` returns what they made, in order (each step returns one result,
    a row, a list of them, or None).

    Example:
        >>> steps = Steps(progress)
        >>> steps.add("torch cpu:0 64x64", measure_one, device, 64)
        >>> rows = steps.run()
    """

    def __init__(self, progress) -> None:
        self.progress = progress
        self.steps: list = []

    def add(self, label: str, step, *args) -> None:
        self.steps.append((label, step, args))

    def run(self) -> list:
        rows: list = []
        total = len(self.steps)
        for done, (label, step, args) in enumerate(self.steps):
            if self.progress is not None:
                self.progress(done, total, label)
            made = step(*args)
            if made is not None:
                rows.extend(made if isinstance(made, list) else [made])
        if self.progress is not None:
            self.progress(total, total, "done")
        return rows

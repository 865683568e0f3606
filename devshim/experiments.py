"""The D2L "GPUs" exercises as measurements, on any installed backend.

Each experiment is a function returning rows (a list of plain dicts, ready
for a table or JSON); ``devshim bench`` prints, saves and plots them.

- ``matmul``    square matmuls on the CPU and every GPU (exercise 1).
- ``logging``   log a norm to the host each step vs once at the end (exercise 3).
- ``parallel``  two matmuls on two devices at once vs in sequence (exercise 4).
- ``transfer``  host-to-device and device-to-host bandwidth ("copying is slow").
- ``overhead``  devshim's own cost against the framework's native call.

Framework code is confined to one small table of operations per backend
(``ops_for``); frameworks are imported only when an experiment runs on them.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib
from typing import Any, Callable, Dict, List, Optional, Sequence

import devshim as ds
from devshim.backends import get_backend
from devshim.errors import DevshimError
from devshim.timing import benchmark

__all__ = [
    "EXPERIMENTS", "Ops", "ops_for", "HostReads",
    "matmul", "logging", "parallel", "transfer", "overhead",
]

Row = Dict[str, Any]
#: ``progress(done, total, label)``: called before the first step and after each one.
Progress = Callable[[int, int, str], None]


class ExperimentError(DevshimError, ValueError):
    """An experiment was asked for something it cannot measure."""


# ---------------------------------------------------------------- the ops table


@dataclasses.dataclass(frozen=True)
class Ops:
    """The framework calls the experiments need, for one backend.

    ``device`` arguments are the backend's native devices (``ds.device(...)``).
    ``device_of``, ``copy_to`` and ``move`` are the framework's own spelling
    of what devshim's ``device_of``, ``to_device`` and ``copy_if_needed`` do,
    the baselines of the ``overhead`` experiment (None: the framework has none).
    """

    name: str
    rand: Callable[[tuple, Any], Any]       # float32 normal samples of a shape on a device
    matmul: Callable[[Any, Any], Any]
    norm: Callable[[Any], Any]              # Frobenius norm, left on the device
    stack: Callable[[List[Any]], Any]
    copy_to: Callable[[Any, Any], Any]
    move: Callable[[Any, Any], Any]
    device_of: Optional[Callable[[Any], Any]]


def _numpy_ops() -> Ops:
    np = importlib.import_module("numpy")
    rng = np.random.default_rng(0)
    return Ops(
        name="numpy",
        rand=lambda shape, device: rng.standard_normal(shape, dtype=np.float32),
        matmul=np.matmul,
        norm=np.linalg.norm,
        stack=np.stack,
        copy_to=lambda x, device: x.copy(),
        move=lambda x, device: np.asarray(x),
        # NumPy 2 arrays have .device ("cpu"); NumPy 1 has no device query at all.
        device_of=(lambda x: x.device) if hasattr(np.ndarray, "device") else None,
    )


def _torch_ops() -> Ops:
    torch = importlib.import_module("torch")
    return Ops(
        name="torch",
        rand=lambda shape, device: torch.randn(shape, device=device),
        matmul=torch.matmul,
        norm=torch.linalg.norm,
        stack=torch.stack,
        copy_to=lambda x, device: x.to(device, copy=True),
        move=lambda x, device: x.to(device),
        device_of=lambda x: x.device,
    )


def _tensorflow_ops() -> Ops:
    tf = importlib.import_module("tensorflow")

    def scope(device):
        # devshim's TensorFlow devices are context managers; accept plain names too.
        return tf.device(device) if isinstance(device, str) else device

    def rand(shape, device):
        with scope(device):
            return tf.random.normal(shape)

    def copy_to(x, device):
        with scope(device):
            return tf.identity(x)

    return Ops(
        name="tensorflow",
        rand=rand,
        matmul=tf.matmul,
        norm=tf.norm,
        stack=tf.stack,
        copy_to=copy_to,
        move=copy_to,  # TensorFlow has no "copy only if needed"; identity in a scope is the idiom
        device_of=lambda x: x.device,
    )


def _mxnet_ops() -> Ops:
    mx = importlib.import_module("mxnet")
    return Ops(
        name="mxnet",
        rand=lambda shape, device: mx.nd.random.normal(shape=shape, ctx=device, dtype="float32"),
        matmul=mx.nd.dot,
        norm=mx.nd.norm,
        stack=lambda xs: mx.nd.stack(*xs),
        copy_to=lambda x, device: x.copyto(device),
        move=lambda x, device: x.as_in_context(device),
        device_of=lambda x: x.ctx,
    )


_OPS_FACTORIES: Dict[str, Callable[[], Ops]] = {
    "numpy": _numpy_ops,
    "torch": _torch_ops,
    "tensorflow": _tensorflow_ops,
    "mxnet": _mxnet_ops,
}
_ops_cache: Dict[str, Ops] = {}


def ops_for(backend: Optional[str] = None) -> Ops:
    """The operations table for a backend (the selected one by default).

    Example:
        >>> ops = ops_for("torch")
        >>> y = ops.matmul(ops.rand((4, 4), ds.cpu()), ops.rand((4, 4), ds.cpu()))
    """
    name = get_backend(backend).name
    if name not in _OPS_FACTORIES:
        raise ExperimentError(
            f"The experiments have no operations for the {name} backend yet; "
            f"run them with one of: {', '.join(_OPS_FACTORIES)}."
        )
    if name not in _ops_cache:
        _ops_cache[name] = _OPS_FACTORIES[name]()
    return _ops_cache[name]


# ---------------------------------------------------------------- helpers


class HostReads:
    """The one door through which experiments read device values on the host.

    Every read is an explicit ``ds.to_numpy`` and is counted, so a transfer
    guard (or a test) can watch or wrap ``read`` to see each one.

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


class _Steps:
    """Runs labelled steps, reporting progress before the first and after each."""

    def __init__(self, progress: Optional[Progress]) -> None:
        self.progress = progress
        self.steps: List[tuple] = []

    def add(self, label: str, step: Callable[[], None]) -> None:
        self.steps.append((label, step))

    def run(self) -> None:
        total = len(self.steps)
        for done, (label, step) in enumerate(self.steps):
            if self.progress is not None:
                self.progress(done, total, label)
            step()
        if self.progress is not None:
            self.progress(total, total, "done")


def _native(device: Any, backend: str) -> Any:
    return ds.device(device, backend=backend)


def _name_of(native: Any, backend: str) -> str:
    described = get_backend(backend).describe(native)
    return f"{described} (virtual)" if described.virtual else str(described)


def _check_sizes(sizes: Sequence[Any], what: str) -> List[Any]:
    sizes = list(sizes)
    if not sizes or any(not isinstance(s, (int, float)) or isinstance(s, bool) or s <= 0 for s in sizes):
        raise ExperimentError(f"{what} must be a non-empty list of positive numbers, not {sizes!r}.")
    return sizes


# ---------------------------------------------------------------- experiments


def matmul(
    sizes: Sequence[int] = (16, 64, 256, 1024),
    *,
    backend: Optional[str] = None,
    devices: Optional[Sequence[Any]] = None,
    min_run_time: float = 0.2,
    progress: Optional[Progress] = None,
) -> List[Row]:
    """Time ``n x n`` float32 matmuls on the CPU and each GPU (D2L exercise 1).

    Rows: backend, device, size, seconds (median per matmul), gflops, and
    cpu_over_device (CPU seconds / this device's seconds: above 1, the device
    is faster). ``devices`` limits the accelerators; the CPU is always
    measured, as the reference.

    Example:
        >>> for row in matmul([64, 1024]):
        ...     print(row["device"], row["size"], row["gflops"])
    """
    sizes = [int(n) for n in _check_sizes(sizes, "matmul sizes")]
    adapter = get_backend(backend)
    name, ops = adapter.name, ops_for(adapter.name)
    cpu = adapter.cpu()
    chosen = adapter.devices()[1:] if devices is None else [_native(d, name) for d in devices]
    targets = [cpu] + [d for d in chosen if adapter.describe(d) != adapter.describe(cpu)]
    rows: List[Row] = []
    cpu_seconds: Dict[int, float] = {}
    steps = _Steps(progress)

    def measure(device: Any, n: int) -> None:
        a, b = ops.rand((n, n), device), ops.rand((n, n), device)
        m = benchmark(ops.matmul, a, b, warmup=1, min_run_time=min_run_time, device=device)
        if device is cpu:
            cpu_seconds[n] = m.median
        rows.append({
            "backend": name, "device": _name_of(device, name), "size": n,
            "seconds": m.median, "gflops": 2 * n**3 / m.median / 1e9,
            "cpu_over_device": cpu_seconds[n] / m.median,
        })

    for device in targets:
        for n in sizes:
            steps.add(f"{name} {_name_of(device, name)} {n}x{n}", lambda d=device, n=n: measure(d, n))
    steps.run()
    return rows


def logging(
    steps: int = 1000,
    size: int = 100,
    *,
    backend: Optional[str] = None,
    device: Any = None,
    min_run_time: float = 0.3,
    progress: Optional[Progress] = None,
) -> List[Row]:
    """Log a matmul's Frobenius norm to the host every step vs keep the log on
    the device and move it once (D2L exercise 3).

    Rows, one per variant: seconds (median for all ``steps``), host_reads
    (``steps`` vs 1, counted through ``HostReads``), and slowdown (seconds /
    the on-device variant's seconds). Both variants must log the same values.

    Example:
        >>> slow, fast = logging(steps=1000)
        >>> slow["host_reads"], fast["host_reads"], slow["slowdown"]
        (1000, 1, 3.2)
    """
    if not isinstance(steps, int) or steps < 1:
        raise ExperimentError(f"steps must be a whole number >= 1, not {steps!r}.")
    size = int(_check_sizes([size], "logging size")[0])
    adapter = get_backend(backend)
    name, ops = adapter.name, ops_for(adapter.name)
    target = adapter.try_gpu() if device is None else _native(device, name)
    a, b = ops.rand((size, size), target), ops.rand((size, size), target)

    def to_host_each_step(reads: HostReads) -> List[float]:
        log = []
        for _ in range(steps):
            log.append(float(reads.read(ops.norm(ops.matmul(a, b)))))
        return log

    def on_device_move_once(reads: HostReads) -> List[float]:
        log = [ops.norm(ops.matmul(a, b)) for _ in range(steps)]
        return [float(v) for v in reads.read(ops.stack(log)).ravel()]

    variants = [("log to host each step", to_host_each_step),
                ("log on device, move once", on_device_move_once)]
    results: Dict[str, Row] = {}
    logs: Dict[str, List[float]] = {}
    plan = _Steps(progress)

    def measure(label: str, variant: Callable[[HostReads], List[float]]) -> None:
        counted = HostReads()
        logs[label] = variant(counted)
        m = benchmark(variant, HostReads(), warmup=1, min_run_time=min_run_time, device=target, label=label)
        results[label] = {
            "backend": name, "device": _name_of(target, name), "variant": label,
            "steps": steps, "size": size, "seconds": m.median, "host_reads": counted.count,
        }

    for label, variant in variants:
        plan.add(f"{name} {label}", lambda label=label, variant=variant: measure(label, variant))
    plan.run()
    first, second = (logs[label] for label, _ in variants)
    if len(first) != len(second) or any(abs(x - y) > 1e-3 * max(1.0, abs(x)) for x, y in zip(first, second)):
        raise ExperimentError(
            f"The two logging variants logged different norms on {name}; the experiment is broken. "
            f"Please report it with the output of `devshim info`."
        )
    fast = results[variants[1][0]]["seconds"]
    rows = [results[label] for label, _ in variants]
    for row in rows:
        row["slowdown"] = row["seconds"] / fast
    return rows


def parallel(
    size: int = 512,
    repeats: int = 10,
    *,
    backend: Optional[str] = None,
    devices: Optional[Sequence[Any]] = None,
    min_run_time: float = 0.3,
    progress: Optional[Progress] = None,
) -> List[Row]:
    """Two streams of matmuls on two devices at once vs both in sequence on
    one device (D2L exercise 4).

    Each stream is ``repeats`` ``size x size`` matmuls; "at once" runs the
    two streams from two threads. The devices are the first two GPUs (or
    virtual devices); with fewer, the one device there is runs both streams,
    which shows what concurrency buys on it (the row's ``note`` says so).
    Rows: variant, devices, seconds, and speedup (sequential / this).

    Example:
        >>> seq, both = parallel()
        >>> both["speedup"]   # about 2 on two idle GPUs
    """
    size = int(_check_sizes([size], "parallel size")[0])
    if not isinstance(repeats, int) or repeats < 1:
        raise ExperimentError(f"repeats must be a whole number >= 1, not {repeats!r}.")
    adapter = get_backend(backend)
    name, ops = adapter.name, ops_for(adapter.name)
    if devices is not None:
        chosen = [_native(d, name) for d in devices][:2]
    else:
        gpus = adapter.devices()[1:]
        chosen = gpus[:2] if gpus else [adapter.cpu()]
    first, second = chosen[0], chosen[-1]
    note = "" if len(chosen) == 2 and _name_of(first, name) != _name_of(second, name) else (
        "one device only: both streams share it")
    inputs = [(ops.rand((size, size), d), ops.rand((size, size), d)) for d in (first, second)]
    on_first = [inputs[0], tuple(ds.to_device(x, first) for x in inputs[1])]

    def stream(a, b):
        out = None
        for _ in range(repeats):
            out = ops.matmul(a, b)
        return out

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)

    def sequential():
        return [stream(*pair) for pair in on_first]

    def at_once():
        futures = [pool.submit(stream, *pair) for pair in inputs]
        return [f.result() for f in futures]

    rows: List[Row] = []
    plan = _Steps(progress)

    def measure(label: str, fn: Callable[[], Any], where: str) -> None:
        m = benchmark(fn, warmup=1, min_run_time=min_run_time, label=label)
        rows.append({"backend": name, "variant": label, "devices": where, "size": size,
                     "repeats": repeats, "seconds": m.median, "note": note})

    both = f"{_name_of(first, name)} + {_name_of(second, name)}"
    plan.add(f"{name} sequential", lambda: measure("in sequence on one device", sequential, _name_of(first, name)))
    plan.add(f"{name} at once", lambda: measure("at once on two devices", at_once, both))
    try:
        plan.run()
    finally:
        pool.shutdown()
    for row in rows:
        row["speedup"] = rows[0]["seconds"] / row["seconds"]
    return rows


def transfer(
    sizes_mb: Sequence[float] = (1, 8, 64),
    *,
    backend: Optional[str] = None,
    device: Any = None,
    min_run_time: float = 0.2,
    progress: Optional[Progress] = None,
) -> List[Row]:
    """Host-to-device (``ds.to_device``) and device-to-host (``ds.to_numpy``)
    bandwidth for float32 buffers of ``sizes_mb`` MiB.

    ``device`` defaults to the first GPU; without one it is the CPU, and the
    numbers are host memory-copy bandwidth. Rows: direction, device,
    megabytes, seconds (median per copy), gb_per_s.

    Example:
        >>> for row in transfer([1, 64]):
        ...     print(row["direction"], row["megabytes"], row["gb_per_s"])
    """
    sizes_mb = _check_sizes(sizes_mb, "transfer sizes (MiB)")
    adapter = get_backend(backend)
    name, ops = adapter.name, ops_for(adapter.name)
    target = adapter.try_gpu() if device is None else _native(device, name)
    where = _name_of(target, name)
    rows: List[Row] = []
    plan = _Steps(progress)

    def measure(mb: float) -> None:
        count = max(1, int(mb * 2**20) // 4)
        nbytes = count * 4
        host = ops.rand((count,), adapter.cpu())
        placed = ds.to_device(host, target)
        for direction, fn, arg in (("host->device", lambda x: ds.to_device(x, target), host),
                                   ("device->host", ds.to_numpy, placed)):
            m = benchmark(fn, arg, warmup=1, min_run_time=min_run_time, device=target, label=direction)
            rows.append({"backend": name, "direction": direction, "device": where,
                         "megabytes": nbytes / 2**20, "seconds": m.median,
                         "gb_per_s": nbytes / m.median / 1e9})

    for mb in sizes_mb:
        plan.add(f"{name} {where} {mb:g} MiB", lambda mb=mb: measure(mb))
    plan.run()
    return rows


def overhead(
    *,
    backend: Optional[str] = None,
    device: Any = None,
    min_run_time: float = 0.05,
    rounds: int = 3,
    progress: Optional[Progress] = None,
) -> List[Row]:
    """devshim's own cost against the framework's native call, as ratios.

    Operations: ``device_of``, ``copy_if_needed`` when nothing has to move,
    ``to_device`` of a small (64 B) and a 1 MiB tensor, and ``to_device`` of
    a nest (a dict holding 8 small tensors). Native and devshim runs
    alternate for ``rounds`` rounds; each keeps its fastest median, which
    resists bursts of load from elsewhere. Rows: operation, native_seconds,
    devshim_seconds, ratio (devshim / native; None when the framework has no
    native equivalent).

    Example:
        >>> for row in overhead():
        ...     print(row["operation"], f"{row['ratio']:.2f}x")
    """
    if not isinstance(rounds, int) or rounds < 1:
        raise ExperimentError(f"rounds must be a whole number >= 1, not {rounds!r}.")
    adapter = get_backend(backend)
    name, ops = adapter.name, ops_for(adapter.name)
    target = adapter.try_gpu() if device is None else _native(device, name)
    small = ds.to_device(ops.rand((16,), adapter.cpu()), target)
    large = ds.to_device(ops.rand((512, 512), adapter.cpu()), target)
    nest = {"inputs": [ds.to_device(ops.rand((4, 4), adapter.cpu()), target) for _ in range(4)],
            "targets": [ds.to_device(ops.rand((4,), adapter.cpu()), target) for _ in range(4)]}

    def native_nest(batch, device):
        return {"inputs": [ops.copy_to(x, device) for x in batch["inputs"]],
                "targets": [ops.copy_to(x, device) for x in batch["targets"]]}

    cases = [
        ("device_of", ops.device_of and (lambda: ops.device_of(small)), lambda: ds.device_of(small)),
        ("copy_if_needed (no move)", lambda: ops.move(small, target), lambda: ds.copy_if_needed(small, target)),
        ("to_device 64 B", lambda: ops.copy_to(small, target), lambda: ds.to_device(small, target)),
        ("to_device 1 MiB", lambda: ops.copy_to(large, target), lambda: ds.to_device(large, target)),
        ("to_device nest of 8", lambda: native_nest(nest, target), lambda: ds.to_device(nest, target)),
    ]
    rows: List[Row] = []
    plan = _Steps(progress)

    def measure(operation: str, native_fn: Optional[Callable[[], Any]], devshim_fn: Callable[[], Any]) -> None:
        best: Dict[str, float] = {}
        for _ in range(rounds):
            for who, fn in (("native", native_fn), ("devshim", devshim_fn)):
                if fn is None:
                    continue
                median = benchmark(fn, warmup=1, min_run_time=min_run_time, device=target).median
                best[who] = min(best.get(who, median), median)
        native_s = best.get("native")
        rows.append({"backend": name, "device": _name_of(target, name), "operation": operation,
                     "native_seconds": native_s, "devshim_seconds": best["devshim"],
                     "ratio": best["devshim"] / native_s if native_s else None})

    for operation, native_fn, devshim_fn in cases:
        plan.add(f"{name} {operation}", lambda o=operation, n=native_fn, d=devshim_fn: measure(o, n, d))
    plan.run()
    return rows


#: name -> function, for the CLI.
EXPERIMENTS: Dict[str, Callable[..., List[Row]]] = {
    "matmul": matmul,
    "logging": logging,
    "parallel": parallel,
    "transfer": transfer,
    "overhead": overhead,
}

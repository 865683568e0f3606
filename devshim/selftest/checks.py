"""The checks `devshim selftest` runs on one backend, on the devices this machine has.

Each check is a function declared with `@check(...)`: its group, what it
asserts (one line, shown in the report), and what it runs on:

`"backend"`      once;
`"device"`       once per device: the CPU and each GPU;
`"accelerator"`  once per GPU (skipped, with the reason, when there is none);
`"pair"`         once per ordered pair of GPUs (needs two).

A check returns nothing or a short detail string; it fails by raising
(`expect` raises `CheckFailed` with a message saying what went wrong) and
skips by raising `Skip(reason)`. Checks make tensors with the backend's
`ops` module (the framework's own calls) and assert what devshim promises
about them, so they are the conformance suite's contract, asked of the
user's hardware, without pytest or the test harnesses.
"""

from __future__ import annotations

import collections
import contextlib
import warnings
from typing import Any, NamedTuple

import numpy as np

import devshim as ds
from devshim.bench.experiment import device_name

__all__ = ["Check", "CheckFailed", "Skip", "Context", "CHECKS", "check", "expect", "targets"]

class Pair(NamedTuple):
    """A namedtuple in the nests the checks move."""

    first: Any
    second: Any


class CheckFailed(AssertionError):
    """A check found devshim not doing what it promises."""


class Skip(Exception):
    """A check that cannot run here; the message says why."""


def expect(condition, message: str) -> None:
    """Fail the check with `message` unless `condition` holds (an `assert` that `-O` keeps).

    Example:
        >>> expect(ds.copy_if_needed(x, d) is x, "copy_if_needed copied a tensor already there")
    """
    if not condition:
        raise CheckFailed(message)


def _raised(error: type[BaseException], fn, *args):
    """The `error` that `fn(*args)` raised, or None when it returned (other errors go on up)."""
    try:
        fn(*args)
    except error as err:
        return err
    return None


class Check:
    """One declared check.

    Example:
        >>> Check("copies", "conformance", "to_device copies ...", "device", fn)
    """

    def __init__(self, name: str, group: str, summary: str, per: str, fn, needs: tuple = ()) -> None:
        self.name, self.group, self.summary, self.per, self.fn, self.needs = name, group, summary, per, fn, needs


CHECKS: list = []


def check(name: str, group: str, summary: str, *, per: str = "backend", needs: tuple = ()):
    """Declare a check (a decorator). `needs` names backend modules it requires:
    `"ops"`, `"guard"`, `"model"`.

    Example:
        >>> @check("devices", "conformance", "the CPU first, then each GPU")
        ... def devices_listed(ctx):
        ...     expect(ds.devices()[0] == ds.cpu(), "devices() does not start with the CPU")
    """
    if per not in ("backend", "device", "accelerator", "pair"):
        raise ValueError(f"per must be backend, device, accelerator or pair, not {per!r}")

    def declare(fn):
        CHECKS.append(Check(name, group, summary, per, fn, needs))
        return fn

    return declare


class Context:
    """What the checks know about the backend under test: its adapter, `ops` module and devices.

    Example:
        >>> ctx = Context("torch")
        >>> ctx.where(ctx.cpu)
        'cpu:0'
    """

    def __init__(self, backend: str) -> None:
        self.adapter = ds.get_backend(backend)
        self.name = self.adapter.name
        spec = self.adapter.spec
        # The backend's test operations; checks that use them declare needs=("ops",), so only
        # run where it exists (typed Any: each backend's module has its own functions).
        self.ops: Any = spec.module("ops") if spec.has_module("ops") else None
        # Asking for devices first makes virtual devices exist before any tensor (TensorFlow
        # and Keras need them before their first op or variable).
        self.devices = self.adapter.devices()
        self.cpu = self.devices[0]
        self.gpus = self.devices[1:]
        #: what earlier checks of this process did, for checks whose outcome depends on it
        self.seen: dict = {}

    def where(self, native) -> str:
        """"gpu:1", or "gpu:1 (virtual)"."""
        return device_name(native, self.name)

    def describe(self, native):
        return self.adapter.describe(native)

    def tensor(self, values, native):
        """`values` (array-like) as a tensor on `native`, made with the framework's own call."""
        return self.ops.from_numpy(np.asarray(values), native)

    def scope(self, native) -> contextlib.AbstractContextManager:
        """A `with` block placing work on `native` where the framework has one (TensorFlow,
        CuPy, MXNet), else nothing."""
        return native if hasattr(native, "__enter__") else contextlib.nullcontext()


def targets(check_: Check, ctx: Context) -> list:
    """What `check_` runs on here: a list of (label, args); raises Skip when nothing fits."""
    if check_.per == "backend":
        return [("", ())]
    if check_.per == "device":
        return [(ctx.where(d), (d,)) for d in ctx.devices]
    if not ctx.gpus:
        raise Skip(_no_gpu(ctx))
    if check_.per == "accelerator":
        return [(ctx.where(g), (g,)) for g in ctx.gpus]
    if len(ctx.gpus) < 2:
        raise Skip(f"{ctx.name} sees one GPU here; this needs two")
    return [(f"{ctx.where(a)} -> {ctx.where(b)}", (a, b)) for a in ctx.gpus for b in ctx.gpus if a is not b]


def _no_gpu(ctx: Context) -> str:
    if ds.settings.accelerators_hidden():
        return f"{ds.settings.DEVICE_VAR}=cpu hides the GPUs"
    if ctx.adapter.spec.virtual_devices:
        return (f"{ctx.name} sees no GPU here; {ds.settings.VIRTUAL_DEVICES_VAR}=2 runs this on two virtual "
                f"GPUs on the CPU")
    return f"{ctx.name} sees no GPU here"


def _same_values(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")


VALUES = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5

# ------------------------------------------------------------------ devices


@check("devices", "conformance",
       "devices() is the CPU then each GPU; try_all_gpus() is never empty; try_gpu(i) falls back "
       "to the CPU; gpu(i) of a missing GPU raises DeviceUnavailableError")
def devices_listed(ctx: Context):
    n = ds.num_gpus()
    found = ds.devices()
    expect(len(found) == 1 + n, f"devices() lists {len(found)} devices, but num_gpus() is {n}")
    expect(ctx.describe(found[0]).kind == "cpu", f"devices() starts with {ctx.where(found[0])}, not the CPU")
    for i, native in enumerate(found[1:]):
        described = ctx.describe(native)
        expect((described.kind, described.index) == ("gpu", i), f"devices()[{i + 1}] is {described}, not gpu:{i}")
        expect(ctx.describe(ds.gpu(i)) == described, f"gpu({i}) is not devices()[{i + 1}]")
        expect(ctx.describe(ds.device(f"gpu:{i}")) == described, f'device("gpu:{i}") is not gpu({i})')
    all_gpus = ds.try_all_gpus()
    expected = found[1:] or [ds.cpu()]
    expect([str(ctx.describe(d)) for d in all_gpus] == [str(ctx.describe(d)) for d in expected],
           f"try_all_gpus() is {all_gpus!r}, expected {expected!r}")
    expect(ctx.describe(ds.try_gpu(n)).kind == "cpu", f"try_gpu({n}) did not fall back to the CPU")
    expect(ctx.describe(ds.device("cpu")).kind == "cpu", 'device("cpu") is not the CPU')
    err = _raised(ds.DeviceUnavailableError, ds.gpu, n)
    expect(err is not None, f"gpu({n}) did not raise DeviceUnavailableError with {n} GPU(s)")
    expect(f"{n} GPU" in str(err), f"gpu({n})'s error does not say how many GPUs there are: {err}")
    return f"1 CPU and {n} GPU{'s' if n != 1 else ''}" + (" (virtual)" if n and ctx.describe(found[1]).virtual else "")


# ------------------------------------------------------------------ tensors


@check("new tensors", "conformance",
       "a tensor made on a device reports it (device_of), holds the values given, and ops on it "
       "compute there", per="device", needs=("ops",))
def tensors_land(ctx: Context, native):
    x = ctx.tensor(VALUES, native)
    expect(ds.neutral_device(x) == ctx.describe(native), f"device_of says {ds.neutral_device(x)}, expected {ctx.where(native)}")
    expect(_same_values(ds.to_numpy(x), VALUES), "to_numpy of the tensor differs from the values it was made from")
    y = ctx.ops.matmul(ctx.ops.rand((4, 4), native), ctx.ops.rand((4, 4), native))
    expect(ds.neutral_device(y) == ctx.describe(native), f"a matmul of two tensors on {ctx.where(native)} ran on {ds.neutral_device(y)}")
    common = ds.ensure_same_device(x, {"y": [y]})
    expect(ds.same_device(x, y) and common == ds.device_of(x) and ctx.describe(common) == ctx.describe(native),
           "same_device/ensure_same_device disagree with device_of")


@check("to_device and copy_if_needed", "conformance",
       "to_device returns a new tensor even when already there; copy_if_needed returns the same "
       "tensor (and the same container) when nothing has to be copied", per="device", needs=("ops",))
def copies(ctx: Context, native):
    x = ctx.tensor(VALUES, native)
    where = ctx.describe(native)
    for spec in (native, str(where), where):
        y = ds.to_device(x, spec)
        expect(y is not x, f"to_device(x, {spec!r}) returned x itself; it must copy")
        expect(ds.neutral_device(y) == where, f"to_device(x, {spec!r}) landed on {ds.neutral_device(y)}")
        expect(_same_values(ds.to_numpy(y), VALUES), f"to_device(x, {spec!r}) changed the values")
        expect(ds.copy_if_needed(x, spec) is x, f"copy_if_needed(x, {spec!r}) copied a tensor already there")
    batch = {"x": x, "rest": [x, "label"]}
    expect(ds.copy_if_needed(batch, native) is batch, "copy_if_needed rebuilt a dict whose tensors were all there")
    host = ds.to_numpy(x)
    host[0, 0] = 1e6
    expect(_same_values(ds.to_numpy(x), VALUES), "to_numpy returned memory shared with the tensor")


#: (label, values) of the exact-copies check: each dtype's edge values, kept bit for bit.
BITS_CASES = (
    ("float32", np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, np.finfo(np.float32).max], np.float32)),
    ("float16", np.array([0.0, -0.0, np.inf, np.nan, 6e-8, 65504.0], np.float16)),
    ("int32", np.array([np.iinfo(np.int32).min, -1, 0, np.iinfo(np.int32).max], np.int32)),
    ("uint8", np.array([0, 1, 255], np.uint8)),
    ("bool", np.array([True, False, True])),
    ("float32 2-D", np.arange(12, dtype=np.float32).reshape(3, 4) / 7),
)


@check("exact copies", "conformance",
       "copies to and from the device keep dtype, shape and every bit (-0.0, inf, NaN, "
       "subnormals, integer extremes)", per="device", needs=("ops",))
def exact_copies(ctx: Context, native):
    checked, unsupported = [], []
    for label, values in BITS_CASES:
        try:
            source = ctx.tensor(values, ctx.cpu)
        except Exception as err:  # the framework cannot make this dtype: not devshim's to check
            unsupported.append(f"{label} ({type(err).__name__})")
            continue
        host = ds.to_numpy(source)
        expect(host.dtype == values.dtype and host.shape == values.shape,
               f"{label}: to_numpy gave {host.dtype}{list(host.shape)} for {values.dtype}{list(values.shape)}")
        there = ds.to_device(source, native)
        back = ds.to_device(there, ctx.cpu)
        for what, value in (("on the device", ds.to_numpy(there)), ("back on the CPU", ds.to_numpy(back))):
            expect(value.dtype == host.dtype and value.shape == host.shape,
                   f"{label} {what}: {value.dtype}{list(value.shape)}, expected {host.dtype}{list(host.shape)}")
            expect(value.tobytes() == host.tobytes(), f"{label} {what}: the bits changed")
        checked.append(label)
    expect(checked, f"no dtype could be made on {ctx.name}: {', '.join(unsupported)}")
    return ", ".join(checked) + (f"; {ctx.name} cannot make {', '.join(unsupported)}" if unsupported else "")


@check("nests", "conformance",
       "to_device and copy_if_needed walk dicts, lists, tuples and namedtuples, keep their types "
       "and leave non-tensor leaves alone", per="device", needs=("ops",))
def nests(ctx: Context, native):
    a, b = ctx.tensor(VALUES, ctx.cpu), ctx.tensor(VALUES * 2, ctx.cpu)
    marker = object()
    nest = collections.OrderedDict(pair=Pair(a, [b, (a, marker)]), n=3)
    for fn in (ds.to_device, ds.copy_if_needed):
        moved = fn(nest, native)
        expect(type(moved) is collections.OrderedDict and list(moved) == ["pair", "n"],
               f"{fn.__name__} did not rebuild an OrderedDict with its keys in order")
        pair: Any = moved["pair"]
        expect(type(pair) is Pair and type(pair.second[1]) is tuple, f"{fn.__name__} lost a namedtuple or tuple type")
        expect(pair.second[1][1] is marker and moved["n"] == 3, f"{fn.__name__} changed a non-tensor leaf")
        leaves = (pair.first, pair.second[0], pair.second[1][0])
        expect(all(ds.neutral_device(t) == ctx.describe(native) for t in leaves),
               f"{fn.__name__} left a tensor of the nest off {ctx.where(native)}")
        expect(_same_values(ds.to_numpy(leaves[1]), VALUES * 2), f"{fn.__name__} changed values in a nest")
    expect(ds.to_device(nest, native)["pair"].first is not a, "to_device reused a tensor of the nest")


@check("host and device", "conformance",
       "a host tensor copied to the GPU lands there with its values; tensors on the two are "
       "different devices and ensure_same_device names both and the fix", per="accelerator", needs=("ops",))
def host_and_device(ctx: Context, gpu):
    x = ctx.tensor(VALUES, ctx.cpu)
    y = ds.to_device(x, gpu)
    expect(ds.neutral_device(y) == ctx.describe(gpu), f"to_device(x, {ctx.where(gpu)}) landed on {ds.neutral_device(y)}")
    expect(_same_values(ds.to_numpy(y), VALUES), "the copy on the GPU holds other values")
    expect(not ds.same_device(x, y), "same_device says a host tensor and a GPU tensor share a device")
    err = _raised(ds.DeviceMismatchError, ds.ensure_same_device, x, {"y": y})
    expect(err is not None, "ensure_same_device accepted a host tensor and a GPU tensor")
    message = str(err)
    expect(str(ds.neutral_device(x)) in message and str(ds.neutral_device(y)) in message,
           f"the DeviceMismatchError does not name both devices: {message}")
    expect("ds.copy_if_needed" in message, f"the DeviceMismatchError does not show the fix: {message}")
    back = ds.copy_if_needed(y, ctx.cpu)
    expect(ds.neutral_device(back) == ctx.describe(ctx.cpu) and _same_values(ds.to_numpy(back), VALUES),
           "copy_if_needed back to the CPU did not bring the values back")


@check("GPU to GPU", "conformance",
       "copies between two GPUs land on the target with their values; copy_if_needed copies only "
       "what is elsewhere", per="pair", needs=("ops",))
def gpu_to_gpu(ctx: Context, first, second):
    x, y = ctx.tensor(VALUES, first), ctx.tensor(VALUES * 3, second)
    z = ds.to_device(x, second)
    expect(ds.neutral_device(z) == ctx.describe(second), f"to_device landed on {ds.neutral_device(z)}, not {ctx.where(second)}")
    expect(_same_values(ds.to_numpy(z), VALUES), "the copy holds other values")
    moved = ds.copy_if_needed({"x": x, "y": y}, second)
    expect(moved["y"] is y, "copy_if_needed copied a tensor already on the target GPU")
    expect(moved["x"] is not x and ds.neutral_device(moved["x"]) == ctx.describe(second),
           "copy_if_needed did not copy the tensor on the other GPU")
    expect(_same_values(ds.to_numpy(ctx.ops.add(y, z)), VALUES * 4), "Y + Z on one GPU gave wrong values")


@check("generic code", "conformance",
       "xp = ds.array_module(x) computes on x's device with x's framework", per="device", needs=("ops",))
def generic_code(ctx: Context, native):
    x = ctx.tensor(VALUES, native)
    if hasattr(ctx.ops, "as_generic"):  # MXNet: its NumPy front-end, as generic code uses it
        x = ctx.ops.as_generic(x)
    try:
        xp = ds.array_module(x)
    except ds.BackendError as err:  # e.g. torch without array-api-compat
        raise Skip(str(err)) from None
    with ctx.scope(ds.neutral_device(x).native):
        y = xp.exp(x)
    expect(ds.neutral_device(y) == ctx.describe(native), f"{xp.__name__}.exp ran on {ds.neutral_device(y)}")
    np.testing.assert_allclose(ds.to_numpy(y), np.exp(VALUES), rtol=1e-5)
    return f"xp is {xp.__name__}"


# ------------------------------------------------------------------ timing


@check("synchronize, Timer, benchmark", "timing",
       "ds.synchronize waits for a tensor, a device and all devices; Timer and benchmark measure a "
       "matmul there", per="device", needs=("ops",))
def timing(ctx: Context, native):
    a = ctx.ops.rand((256, 256), native)
    y = ctx.ops.matmul(a, a)
    for what in (y, native, ctx.describe(native), None):
        expect(ds.synchronize(what) is None, f"synchronize({what!r}) returned something")
    timer = ds.Timer(native)
    with timer:
        ctx.ops.matmul(a, a)
    expect(len(timer.times) == 1 and timer.times[0] > 0, f"Timer recorded {timer.times}")
    m = ds.benchmark(ctx.ops.matmul, a, a, device=native, warmup=1, min_run_time=0.02)
    expect(m.median > 0 and m.runs >= 1, f"benchmark measured {ds.timing.format_seconds(m.median)} in {m.runs} runs")


# ------------------------------------------------------------------ the transfer guard

@check("implicit host reads refused", "guard",
       "under transfer_guard('disallow') item() and print(x) of a GPU tensor raise "
       "ImplicitTransferError naming the read, the device and ds.to_numpy", per="accelerator",
       needs=("ops", "guard"))
def host_reads_refused(ctx: Context, gpu):
    x = ctx.tensor(np.array([2.0], np.float32), gpu)
    for what, read in (("the framework's item()", ctx.ops.item), ("print(x)", repr)):
        with ds.transfer_guard("disallow") as report:
            err = _raised(ds.ImplicitTransferError, read, x)
            expect(err is not None, f"{what} of a tensor on {ctx.where(gpu)} ran under disallow")
            expect(str(ds.neutral_device(x)) in str(err) and "ds.to_numpy" in str(err),
                   f"{what}: the error does not name the device and ds.to_numpy: {err}")
        expect(report.counts["device-to-host read"] == 1, f"{what}: the report counted {report.counts}")


@check("implicit host reads logged", "guard",
       "under transfer_guard('log') a host read runs, is counted, and warns once per line of code",
       per="accelerator", needs=("ops", "guard"))
def host_reads_logged(ctx: Context, gpu):
    # Three tensors, each read once: a value read once may stay on the host (JAX keeps a GPU
    # array's host copy), and reading it again is then no transfer, for JAX's guard as for devshim's.
    xs = [ctx.tensor(np.array([2.0], np.float32), gpu) for _ in range(3)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ds.transfer_guard("log") as report:
            values = [ctx.ops.item(x) for x in xs]
    expect(values == [2.0] * 3, f"item() under log read {values}")
    expect(report.total == 3, f"the report counted {report.total} transfers, expected 3")
    warned = [w for w in caught if issubclass(w.category, ds.ImplicitTransferWarning)]
    # Once per line for the whole process: only the first device's run of this line warns.
    expected = 0 if ctx.seen.get("logged read") else 1
    ctx.seen["logged read"] = True
    expect(len(warned) == expected, f"{len(warned)} ImplicitTransferWarnings for one line of code, "
                                    f"expected {expected} (once per line in a process)")


@check("explicit copies allowed", "guard",
       "under transfer_guard('disallow') to_device, copy_if_needed, to_numpy and reads of host "
       "tensors pass, and nothing is counted", per="accelerator", needs=("ops", "guard"))
def explicit_copies_allowed(ctx: Context, gpu):
    x = ctx.tensor(VALUES, gpu)
    host = ctx.tensor(np.array([5.0], np.float32), ctx.cpu)
    with ds.transfer_guard("disallow") as report:
        on_cpu = ds.to_device(x, ctx.cpu)
        again = ds.copy_if_needed({"x": on_cpu}, gpu)["x"]
        values = ds.to_numpy(again)
        read = ctx.ops.item(host)
        ds.synchronize(again)
    expect(report.total == 0, f"explicit calls were counted as implicit transfers: {report}")
    expect(_same_values(values, VALUES) and read == 5.0, "values changed on the way")


@check("mixed-device ops refused", "guard",
       "under transfer_guard('disallow') an op with inputs on the GPU and the CPU is refused "
       "instead of copying silently", per="accelerator", needs=("ops", "guard"))
def mixed_ops_refused(ctx: Context, gpu):
    x = ctx.tensor(VALUES, gpu)
    y = ctx.tensor(VALUES, ctx.cpu)
    with ds.transfer_guard("disallow"):
        try:
            ctx.ops.add(x, y)
        except ds.DeviceMismatchError as err:
            expect("ds.copy_if_needed" in str(err), f"the error does not show the fix: {err}")
            return "refused by devshim's guard"
        except Exception as err:  # torch and JAX refuse such ops themselves; devshim leaves it to them
            return f"refused by {ctx.adapter.spec.title} itself ({type(err).__name__})"
    raise CheckFailed(f"an op with inputs on {ctx.where(gpu)} and the CPU ran under disallow")


# ------------------------------------------------------------------ models


def _model(ctx: Context):
    if not hasattr(ctx.ops, "small_model"):
        raise Skip(f"{ctx.name}'s ops module has no small_model to place")
    return ctx.ops.small_model(4, 3)


X = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)


@check("place_model", "placement",
       "place_model puts every parameter on the device; the model computes there, as on the CPU",
       per="device", needs=("ops", "model"))
def place_model(ctx: Context, native):
    net = _model(ctx)
    reference = ds.to_numpy(ctx.ops.forward(net, ctx.tensor(X, ctx.cpu)))
    placed = ds.place_model(net, native)
    # The framework's own device object, which goes into its calls as device_of's does.
    expect(ds.model_device(placed) == native and ctx.describe(ds.model_device(placed)) == ctx.describe(native),
           f"model_device is {ds.model_device(placed)!r}, expected {native!r}")
    expect(ds.model_devices(placed) == {native}, f"model_devices is {ds.model_devices(placed)}")
    out = ctx.ops.forward(placed, ctx.tensor(X, native))
    expect(ds.neutral_device(out) == ctx.describe(native), f"the output is on {ds.neutral_device(out)}")
    # GPUs may multiply float32 in TF32: agreement to 1e-2, not to the last bit.
    np.testing.assert_allclose(ds.to_numpy(out), reference, rtol=1e-2, atol=1e-2)


@check("data-parallel helpers", "placement",
       "replicate, split_batch and allreduce over try_all_gpus() copy data only explicitly (no "
       "implicit transfer under disallow) and put each piece on its device", needs=("ops", "model"))
def data_parallel(ctx: Context):
    devices = ds.try_all_gpus()
    net = _model(ctx)
    y = X[:, :3] * 2
    with ds.transfer_guard("disallow") as report:
        replicas = ds.replicate(net, devices)
        xs, ys = ds.split_batch(ctx.tensor(X, ctx.cpu), ctx.tensor(y, ctx.cpu), devices)
        sums = ds.allreduce([ctx.tensor(np.array([1.0, float(i)], np.float32), d) for i, d in enumerate(devices)])
    expect(report.total == 0, f"implicit transfers under disallow: {report}")
    wanted = [str(ctx.describe(d)) for d in devices]
    expect([str(ctx.describe(ds.model_device(r))) for r in replicas] == wanted, "a replica is not on its device")
    expect([str(ds.neutral_device(s)) for s in xs] == wanted and [str(ds.neutral_device(s)) for s in ys] == wanted,
           "a shard is not on its device")
    base, extra = divmod(len(X), len(devices))
    expect([int(s.shape[0]) for s in xs] == [base + (i < extra) for i in range(len(devices))],
           f"uneven shards: {[int(s.shape[0]) for s in xs]}")
    expect(np.array_equal(np.concatenate([ds.to_numpy(s) for s in xs]), X), "the shards do not add up to the batch")
    total = np.array([len(devices), sum(range(len(devices)))], np.float32)
    expect([str(ds.neutral_device(s)) for s in sums] == wanted, "an allreduce result is not on its input's device")
    expect(all(np.array_equal(ds.to_numpy(s), total) for s in sums), "allreduce did not give every device the sum")
    return f"over {', '.join(ctx.where(d) for d in devices)}"

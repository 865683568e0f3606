"""ds.convert between every pair of installed frameworks: values, dtypes, sharing (checked by
buffer addresses read with each framework's own API, and by writing through one side), nests,
the target forms, and the transfer guard's verdicts on the CPU and on virtual devices.

The `interop` tox env installs torch, JAX, TensorFlow and NumPy together; the `mxnet` env runs
the MXNet/NumPy pairs. Pairs whose frameworks are absent skip, saying which is missing."""

from __future__ import annotations

import importlib
import itertools
import warnings

import numpy as np
import pytest

import devshim as ds
from conftest import VIRTUAL
from devshim.backends import backend_for_tensor
from devshim_conformance import backends_with_harness, load_harness

#: Every conversion names both of its frameworks: the selected backend is never read, so the GPU
#: check's plain passes, one per backend, run each test in one of them (tests/conftest.py).
pytestmark = pytest.mark.same_in_every_pass

SPECS = ds.backends.specs()
#: The backends ds.convert serves (an interop.py) that have a harness, in the registry's order.
FRAMEWORKS = [name for name in backends_with_harness() if SPECS[name].has_module("interop")]
INSTALLED = [name for name in FRAMEWORKS if SPECS[name].is_installed()]
HAS_VIRTUAL = {name for name in FRAMEWORKS if SPECS[name].virtual_devices}
#: NumPy's arrays are the test's own values (devshim's dependency, the host's arrays).
HOST = "numpy"


def _marks(src, dst) -> list:
    """Why a conversion from a CPU tensor of ``src`` to ``dst`` cannot be tested here, as a skip."""
    missing = [n for n in (src, dst) if n not in INSTALLED]
    if missing:
        return [pytest.mark.skip(reason=f"{' and '.join(sorted(set(missing)))} not installed here")]
    if not load_harness(dst).host_arrays:
        covered = "test_a_host_tensor_to_a_framework_without_host_arrays_is_refused_saying_name_the_gpu"
        return [pytest.mark.skip(reason=f"{SPECS[dst].title} has no arrays on the host: {covered}")]
    return []


def _pairs(same=False):
    params = []
    for a, b in itertools.product(FRAMEWORKS, FRAMEWORKS):
        if (a == b) != same:
            continue
        params.append(pytest.param(a, b, marks=_marks(a, b), id=f"{a}-{b}"))
    return params


PAIRS = _pairs()


@pytest.fixture(scope="module", autouse=True)
def _virtual_first():
    """Under DEVSHIM_VIRTUAL_DEVICES, let each framework set up its virtual GPUs before it starts."""
    if VIRTUAL:
        for name in INSTALLED:
            if name in HAS_VIRTUAL:
                ds.num_gpus(backend=name)
    yield


def make(name, array):
    """A tensor of framework ``name`` on the CPU holding ``array``'s values, in storage of its
    own (a host buffer aligned to 64 bytes, which every importer takes in place) where the
    framework takes one in place (its harness's ``on_host``)."""
    made = load_harness(name).on_host(aligned(np.array(array, copy=True)))
    if made is None:
        pytest.skip(f"{SPECS[name].title} has no {np.asarray(array).dtype.name} arrays to convert from")
    return made


def aligned(array, offset=0):
    """A copy of ``array`` whose data starts ``offset`` bytes past a 64-byte boundary (JAX shares
    only 64-byte-aligned host buffers; NumPy aligns small arrays to 16)."""
    raw = np.empty(array.nbytes + 128, dtype=np.uint8)
    start = (-raw.__array_interface__["data"][0]) % 64 + offset
    out = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


def address(name, x):
    """The address of x's first element, read with the framework's own API."""
    return load_harness(name).address(x)


def bits(x):
    host = ds.to_numpy(x)
    return host.dtype.name, host.shape, host.tobytes()


def owner(y):
    return backend_for_tensor(y).name


# Pairs whose DLPack import copies even a plain float32 CPU array (none so far: every pair shares).
COPIES_ON_CPU: set = set()
VALUES = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5


# ------------------------------------------------------------ one device: sharing


@pytest.mark.parametrize("src,dst", PAIRS)
def test_on_the_cpu_the_result_shares_the_memory_and_keeps_values_and_dtype(src, dst):
    x = make(src, VALUES)
    y = ds.convert(x, dst)
    assert owner(y) == dst
    assert bits(y) == bits(x)
    assert ds.neutral_device(y) == ds.neutral_device(x) == ds.Device("cpu")
    assert (address(dst, y) == address(src, x)) == ((src, dst) not in COPIES_ON_CPU)
    z = ds.convert(x, dst, copy=False)
    assert address(dst, z) == address(src, x)


@pytest.mark.parametrize("src,dst", PAIRS)
def test_copy_true_gives_new_storage_with_the_same_bits(src, dst):
    x = make(src, VALUES)
    y = ds.convert(x, dst, copy=True)
    assert owner(y) == dst and bits(y) == bits(x)
    assert address(dst, y) != address(src, x)


@pytest.mark.parametrize("src,dst", PAIRS)
def test_writing_through_the_result_writes_the_source_when_shared_and_not_when_copied(src, dst):
    if not (load_harness(src).mutable and load_harness(dst).mutable):
        pytest.skip("one side's tensors are immutable")
    x = make(src, VALUES)
    y = ds.convert(x, dst)
    if dst == HOST and not y.flags.writeable:  # NumPy < 2 imports DLPack arrays read-only
        assert int(np.__version__.split(".")[0]) < 2
        load_harness(src).fill(x, 100.0)
        assert y[0, 0] == 100.0
        return
    load_harness(dst).fill(y, 100.0)
    assert ds.to_numpy(x)[0, 0] == 100.0
    load_harness(dst).fill(ds.convert(x, dst, copy=True), -7.0)
    assert ds.to_numpy(x)[0, 0] == 100.0


@pytest.mark.parametrize("src", INSTALLED)
def test_a_numpy_view_of_an_immutable_framework_array_is_read_only(src):
    if load_harness(src).mutable:
        pytest.skip(f"{SPECS[src].title}'s tensors can be changed in place")
    y = ds.convert(make(src, VALUES), "numpy")
    assert not y.flags.writeable
    with pytest.raises(ValueError):
        y[0, 0] = 1.0
    assert ds.convert(make(src, VALUES), "numpy", copy=True).flags.writeable


#: The targets of a NumPy array on the host: the other installed frameworks.
HOST_TARGETS = [pytest.param(d, marks=_marks(HOST, d)) for d in INSTALLED if d != HOST]


@pytest.mark.parametrize("dst", HOST_TARGETS)
def test_a_read_only_numpy_array_is_copied_and_copy_false_refuses(dst):
    x = VALUES.copy()
    x.flags.writeable = False
    y = ds.convert(x, dst)
    assert bits(y) == bits(x) and address(dst, y) != address(HOST, x)
    with pytest.raises(ds.CopyRequiredError, match="read-only") as info:
        ds.convert(x, dst, copy=False)
    assert isinstance(info.value, BufferError)


# NumPy layouts an importer may not take as they are: reversed views (negative strides: torch's
# DLPack import aborted the interpreter on them), and a big-endian array (torch and JAX refuse
# that byte order). Run in a fresh interpreter: a failure here used to be an abort, not an error.
ODD_LAYOUTS = """
import json, os
import numpy as np
import devshim as ds

dst = os.environ["CONVERT_TO"]
layouts = {
    "reversed": np.arange(10, dtype=np.float32)[::-1],
    "reversed columns": np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::-1],
    "reversed rows of bool": (np.arange(12).reshape(3, 4) % 3 == 0)[::-1],
    "big-endian": np.arange(6, dtype=">f4").reshape(2, 3),
}
seen = {}
for name, x in layouts.items():
    y = ds.convert(x, dst)
    back = ds.to_numpy(y)
    try:
        ds.convert(x, dst, copy=False)
        refused = None
    except ds.CopyRequiredError as err:
        refused = str(err)
    seen[name] = {"equal": bool(np.array_equal(back, x)), "dtype": back.dtype.str.lstrip("<>="),
                  "wanted": x.dtype.str.lstrip("<>="), "copy_false": refused}
print(json.dumps(seen))
"""


@pytest.mark.parametrize("dst", HOST_TARGETS)
def test_layouts_the_importer_cannot_take_are_copied_never_aborting_the_process(dst):
    from helpers import last_json_lines, start_python

    env = {"DEVSHIM_BACKEND": "numpy", "CONVERT_TO": dst}
    if VIRTUAL:
        env["DEVSHIM_VIRTUAL_DEVICES"] = "2"
    (seen,) = last_json_lines([start_python(ODD_LAYOUTS, **env)])
    for name, result in seen.items():
        assert result["equal"] and result["dtype"] == result["wanted"], (name, result)
    if dst == "torch":  # torch takes no negative stride: the result is a copy, and copy=False says why
        assert "negative stride" in seen["reversed"]["copy_false"]
        assert "negative stride" in seen["reversed rows of bool"]["copy_false"]


@pytest.mark.skipif("jax" not in INSTALLED, reason="jax not installed here")
def test_jax_shares_only_aligned_host_buffers_and_copies_the_others():
    import jax  # noqa: F401 - release() reads the imported module

    from devshim.backends.probes import release

    if release("jax") <= (0, 4, 31):
        pytest.skip("JAX 0.4.31 imports unaligned host buffers in place (measured); later releases copy them")
    x = aligned(VALUES, offset=16)
    y = ds.convert(x, "jax")
    assert bits(y) == bits(x) and address("jax", y) != address("numpy", x)
    with pytest.raises(ds.CopyRequiredError, match="aligned"):
        ds.convert(x, "jax", copy=False)


# TensorFlow's from_dlpack takes any host buffer, and its kernels abort the process ("Check failed:
# IsAligned()") on one not aligned to 64 bytes: NumPy aligns small arrays to 16 only. Run in a
# fresh interpreter, so that a regression fails this test rather than ending the test run.
TF_ALIGNMENT = """
import json
import numpy as np
import tensorflow as tf
import devshim as ds

raw = np.empty(4 * 12 + 128, dtype=np.uint8)
start = (-raw.__array_interface__["data"][0]) % 64
seen = {}
for offset in (0, 4, 16, 32):
    x = raw[start + offset:start + offset + 48].view(np.float32).reshape(3, 4)
    x[...] = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = ds.convert(x, "tensorflow")
    total = float(tf.reduce_sum(y * 2.0))  # an op on the result: where a misaligned import aborted
    shared = np.asarray(y).__array_interface__["data"][0] == x.__array_interface__["data"][0]
    try:
        ds.convert(x, "tensorflow", copy=False)
        refused = None
    except ds.CopyRequiredError as err:
        refused = str(err)
    seen[offset] = {"total": total, "shared": bool(shared), "copy_false": refused}
print(json.dumps(seen))
"""


@pytest.mark.skipif("tensorflow" not in INSTALLED, reason="tensorflow not installed here")
def test_tensorflow_shares_only_64_byte_aligned_host_buffers_and_copies_the_others():
    from helpers import last_json_lines, start_python

    env = {"DEVSHIM_BACKEND": "numpy"}
    if VIRTUAL:
        env["DEVSHIM_VIRTUAL_DEVICES"] = "2"
    (seen,) = last_json_lines([start_python(TF_ALIGNMENT, **env)])
    assert all(result["total"] == 132.0 for result in seen.values()), seen
    assert seen["0"]["shared"] and seen["0"]["copy_false"] is None
    for offset in ("4", "16", "32"):
        assert not seen[offset]["shared"], (offset, seen[offset])
        assert "aligned to 64 bytes" in seen[offset]["copy_false"], (offset, seen[offset])


@pytest.mark.parametrize("src,dst", _pairs(same=True))
def test_the_same_framework_gives_x_itself_or_with_copy_true_a_copy(src, dst):
    x = make(src, VALUES)
    assert ds.convert(x, dst) is x and ds.convert(x, dst, copy=False) is x
    y = ds.convert(x, dst, copy=True)
    assert y is not x and bits(y) == bits(x) and address(dst, y) != address(src, x)


# ------------------------------------------------------------ layouts and dtypes


def transposed(name):
    """A non-contiguous view in frameworks that have views (its harness's ``strided``); others: a copy."""
    return load_harness(name).strided(make(name, VALUES))


@pytest.mark.parametrize("src,dst", PAIRS)
def test_non_contiguous_inputs_keep_their_values(src, dst):
    x = transposed(src)
    y = ds.convert(x, dst)
    assert bits(y) == bits(x)
    try:
        shared = ds.convert(x, dst, copy=False)
    except ds.CopyRequiredError:
        return  # the importer needs row-major memory; copy=None copied above
    assert bits(shared) == bits(x)


def _dtype_params():
    params = []
    for src, dst in itertools.product(FRAMEWORKS, FRAMEWORKS):
        if src == dst:
            continue
        for dtype in ("bool", "complex64", "bfloat16", "int64", "float16"):
            params.append(pytest.param(src, dst, dtype, marks=_marks(src, dst), id=f"{src}-{dst}-{dtype}"))
    return params


def sample(dtype):
    if dtype == "bool":
        return np.array([[True, False, True]])
    if dtype == "complex64":
        return np.array([1 + 2j, -0.0 - 3j, np.nan], dtype=np.complex64)
    if dtype == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return np.array([1.5, -0.0, 3e38, np.inf], dtype=np.float32).astype(ml_dtypes.bfloat16)
    if dtype == "float16":
        return np.array([0.5, -0.0, 65504.0, np.nan], dtype=np.float16)
    return np.array([2**62, -1, 0], dtype=np.int64)


@pytest.mark.parametrize("src,dst,dtype", _dtype_params())
def test_dtypes_one_side_lacks_are_converted_exactly_or_refused_by_name(src, dst, dtype):
    if dtype == "int64" and "jax" in (src, dst):
        import jax

        if not jax.config.jax_enable_x64:
            pytest.skip("JAX without jax_enable_x64 has no int64 arrays")
    x = make(src, sample(dtype))
    try:
        y = ds.convert(x, dst)
    except ds.UnsupportedDtypeError as refused:  # only a dtype the target lacks, said by name
        assert dtype not in load_harness(dst).dtypes and f"{SPECS[dst].title} has no {dtype}" in str(refused)
        return
    assert bits(y) == bits(x)


@pytest.mark.parametrize("dst", INSTALLED)
def test_a_host_tensor_to_a_framework_without_host_arrays_is_refused_saying_name_the_gpu(dst):
    if load_harness(dst).host_arrays:
        pytest.skip(f"{SPECS[dst].title} has arrays on the host (the tests above convert to them)")
    sources = [src for src in INSTALLED if load_harness(src).host_arrays]
    for src in sources:
        x = make(src, VALUES)
        for copy in (None, True, False):
            with pytest.raises(ds.UnsupportedValueError) as refused:
                ds.convert(x, dst, copy=copy)
            assert "Name the GPU" in str(refused.value) and f"ds.convert(x, {dst!r}, device=" in str(refused.value)
        if ds.num_gpus(backend=dst):  # the advice taken: an explicit copy to the GPU
            y = ds.convert(x, dst, device="gpu:0")
            assert owner(y) == dst and str(ds.neutral_device(y)) == "gpu:0" and bits(y) == bits(x)


# ------------------------------------------------------------ nests and targets


def test_nests_keep_their_shape_and_non_tensor_leaves_and_may_mix_frameworks():
    others = [n for n in INSTALLED if n != HOST]
    x = {"a": [make(HOST, VALUES), 3, "s"], "b": tuple(make(n, VALUES) for n in others)}
    for dst in INSTALLED:
        y = ds.convert(x, dst)
        assert type(y) is dict and type(y["a"]) is list and type(y["b"]) is tuple
        assert y["a"][1:] == [3, "s"]
        assert owner(y["a"][0]) == dst and [owner(v) for v in y["b"]] == [dst] * len(others)
        assert bits(y["a"][0]) == bits(x["a"][0])


def test_the_target_is_a_name_an_alias_a_module_or_a_tensor_of_it():
    x = make(HOST, VALUES)
    for name in INSTALLED:
        spec = SPECS[name]
        for target in (name, name.upper(), *spec.aliases, importlib.import_module(spec.import_name), make(name, VALUES)):
            assert owner(ds.convert(x, target)) == name, target


def test_what_it_refuses_is_named():
    with pytest.raises(ds.BackendError, match="Unknown backend 'banana'"):
        ds.convert(np.ones(2), "banana")
    with pytest.raises(ds.BackendError, match="cannot tell which framework"):
        ds.convert(np.ones(2), 3.5)
    with pytest.raises(ds.NotATensorError, match="got builtins.int"):
        ds.convert(3, "numpy")
    with pytest.raises(ds.CopyRequiredError, match="copy= must be None, True or False"):
        ds.convert(np.ones(2), "numpy", copy="yes")


# ------------------------------------------------------------ devices and the guard


def other_frameworks_pairs():
    return [p for p in PAIRS if p.values[0] != HOST]


@pytest.mark.parametrize("src,dst", PAIRS)
def test_device_naming_the_tensors_own_device_is_no_transfer(src, dst):
    x = make(src, VALUES)
    with ds.transfer_guard("disallow") as report:
        y = ds.convert(x, dst, device="cpu", copy=False)
    assert address(dst, y) == address(src, x)
    assert report.total == 0 and report.explicit == []


needs_virtual = pytest.mark.skipif(not VIRTUAL, reason="needs DEVSHIM_VIRTUAL_DEVICES (the interop env's second pass)")


@needs_virtual
@pytest.mark.parametrize("src,dst", [p for p in PAIRS if p.values[1] in HAS_VIRTUAL])
def test_device_another_device_is_an_explicit_copy_the_guard_allows_and_counts(src, dst):
    x = make(src, VALUES)
    with ds.transfer_guard("disallow") as report:
        y = ds.convert(x, dst, device="gpu:1")
    assert owner(y) == dst and ds.neutral_device(y) == ds.Device("gpu", 1, virtual=True)
    assert bits(y) == bits(x)
    assert report.total == 0
    assert [(str(e.source), str(e.target), e.action) for e in report.explicit] == [("cpu:0", "gpu:1", "explicit")]
    assert "1 explicit conversion" in str(report)
    with pytest.raises(ds.CopyRequiredError, match="another device"):
        ds.convert(x, dst, device="gpu:1", copy=False)


@needs_virtual
@pytest.mark.parametrize("src,dst", [p for p in PAIRS if p.values[0] in HAS_VIRTUAL and p.values[1] in HAS_VIRTUAL])
def test_virtual_gpu_i_is_gpu_i_of_every_framework_and_the_result_is_a_copy_there(src, dst):
    x = ds.to_device(make(src, VALUES), "gpu:0")
    with ds.transfer_guard("disallow") as report:
        y = ds.convert(x, dst)
    assert owner(y) == dst and ds.neutral_device(y) == ds.neutral_device(x)
    assert bits(y) == bits(x)
    assert report.total == 0 and report.explicit == []
    with pytest.raises(ds.CopyRequiredError, match="virtual gpu:0"):
        ds.convert(x, dst, copy=False)


@needs_virtual
@pytest.mark.parametrize("name", [s for s in INSTALLED if s in HAS_VIRTUAL])
def test_a_numpy_array_sent_to_a_virtual_gpu_becomes_that_frameworks_tensor(name):
    """As on a real GPU: ds.to_device of a NumPy array to a framework's (virtual) GPU is a tensor of
    that framework there, equal to what ds.convert(x, name, device=...) gives."""
    with ds.use_backend(name):
        for spec in (ds.try_gpu(), "gpu:1"):
            y = ds.to_device(VALUES, spec)
            where = "gpu:0" if spec != "gpu:1" else "gpu:1"
            assert owner(y) == name and str(ds.neutral_device(y)) == where and bits(y) == bits(VALUES)
            z = ds.convert(VALUES, name, device=where)
            assert owner(z) == name and bits(z) == bits(y)


@needs_virtual
@pytest.mark.parametrize("src", [s for s in INSTALLED if s in HAS_VIRTUAL])
def test_leaving_the_device_without_device_is_refused_logged_or_allowed_by_the_guard(src):
    x = ds.to_device(make(src, VALUES), "gpu:0")
    with ds.transfer_guard("disallow") as report:
        with pytest.raises(ds.CrossDeviceConversionError, match="device='cpu:0'") as info:
            ds.convert(x, "numpy")
    assert isinstance(info.value, ds.DeviceMismatchError)
    assert report.counts["device-to-host read"] == 1 and report.events[0].action == "refused"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ds.ImplicitTransferWarning)  # once per site: see test_guard.py
        with ds.transfer_guard("log") as report:
            y = ds.convert(x, "numpy")
    (event,) = report.events
    assert (event.what, event.action, str(event.source), str(event.target)) == (
        "ds.convert(x, 'numpy')", "logged", "gpu:0", "cpu:0")
    assert event.site.rsplit(":", 1)[0].endswith("test_convert.py")
    assert bits(y) == bits(x) and y.flags.writeable
    with ds.transfer_guard("disallow") as report:
        z = ds.convert(x, "numpy", device="cpu")
    assert bits(z) == bits(x) and report.total == 0 and len(report.explicit) == 1
    with pytest.raises(ds.CopyRequiredError):
        ds.convert(x, "numpy", copy=False)


@pytest.mark.skipif(len([n for n in INSTALLED if n != HOST]) < 1, reason="needs a framework besides NumPy")
def test_the_bench_rows_compare_sizes_on_one_device_and_the_native_calls_across_devices():
    from devshim.bench.experiments.convert import run

    src = [n for n in INSTALLED if n != HOST][0]
    rows = run("numpy", backend=src, min_run_time=0.003, sizes=[64, 4096])
    same = [r for r in rows if r["case"] == "same device"]
    assert [(r["backend"], r["to"], r["bytes"]) for r in same] == [(src, "numpy", 64), (src, "numpy", 4096)]
    assert same[0]["vs_smallest"] == 1.0 and same[1]["vs_smallest"] == pytest.approx(same[1]["seconds"] / same[0]["seconds"])
    assert not [r for r in rows if r["case"] == "cross device"]  # NumPy has no GPU
    if VIRTUAL and src in HAS_VIRTUAL:
        rows = run(src, backend="numpy", min_run_time=0.003, sizes=[64])
        (cross,) = [r for r in rows if r["case"] == "cross device"]
        assert cross["device"] == "gpu:0 (virtual)"
        # measured side by side: the median of the per-pair ratios, inside their quartiles
        assert cross["vs_native_low"] <= cross["vs_native"] * 1.000001
        assert cross["vs_native"] <= cross["vs_native_high"] * 1.000001 and cross["native_seconds"] > 0

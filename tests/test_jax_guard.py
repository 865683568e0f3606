"""ds.transfer_guard on JAX in all three directions: JAX's own guards set from the block's levels,
devshim's hooks for what JAX's guard cannot see (NumPy reading arrays in host memory, where
virtual GPUs live), and values JAX already holds on the host. The tests that need a device run
in the virtual tox pass (DEVSHIM_VIRTUAL_DEVICES) or on a real GPU."""

from __future__ import annotations

import contextlib
import pickle
import threading
import warnings

import numpy as np
import pytest

import devshim as ds

jax = pytest.importorskip("jax")
# Importing the harness applies DEVSHIM_VIRTUAL_DEVICES before any array below exists.
from harnesses.jax_harness import HARNESS  # noqa: E402,F401
import jax.numpy as jnp  # noqa: E402

from devshim.backends.jax import _internals  # noqa: E402
from devshim.guard.hooks import is_wrapper  # noqa: E402

# What JAX's own guard raises: jax.errors.JaxRuntimeError from JAX 0.4.32, XlaRuntimeError before.
JAX_REFUSAL = _internals.RUNTIME_ERROR.get()


@pytest.fixture(autouse=True)
def bk():
    with ds.use_backend("jax") as adapter:
        yield adapter


@pytest.fixture
def gpu():
    if ds.num_gpus() == 0:
        pytest.skip("needs a JAX GPU, real or virtual (the DEVSHIM_VIRTUAL_DEVICES pass)")
    return ds.try_gpu()


@pytest.fixture
def on_gpu(gpu):
    """A default device that is a GPU, as JAX has on a GPU machine."""
    with jax.default_device(gpu):
        yield gpu


def fresh(device, values=(1.0, 2.0, 3.0)):
    return jax.device_put(np.asarray(values, dtype=np.float32), device)


@contextlib.contextmanager
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ds.ImplicitTransferWarning)
        yield


# ------------------------------------------------------------ device to host: NumPy's reads

NUMPY_READS = [
    ("np.asarray(x)", lambda x: np.asarray(x)),
    ("np.array(x)", lambda x: np.array(x)),
    ("np.asanyarray(x)", lambda x: np.asanyarray(x)),
    ("np.add(x, ...)", lambda x: np.add(x, 1)),
    ("np.exp(x, ...)", lambda x: np.exp(x)),
    ("np.add.reduce(x, ...)", lambda x: np.add.reduce(x)),
]


@pytest.mark.parametrize("what, read", NUMPY_READS, ids=[w for w, _ in NUMPY_READS])
def test_numpy_reading_a_gpu_array_is_refused_logged_and_computes_what_numpy_did(gpu, what, read):
    x = fresh(gpu)
    expected = read(np.asarray(jax.device_get(x)))
    with ds.transfer_guard("disallow") as report:
        with pytest.raises(ds.ImplicitTransferError) as info:
            read(fresh(gpu))
    assert what in str(info.value) and str(ds.neutral_device(x)) in str(info.value)
    assert report.counts["device-to-host read"] == 1 and report.events[0].what == what
    with quiet():
        with ds.transfer_guard("log") as report:
            got = read(fresh(gpu))
    assert report.total == 1 and report.events[0].action == "logged"
    np.testing.assert_allclose(got, expected)
    assert isinstance(got, (np.ndarray, np.generic))


def test_numpy_reads_of_host_arrays_are_no_transfers():
    x = fresh(ds.cpu())
    with ds.transfer_guard("disallow") as report:
        for _, read in NUMPY_READS:
            read(x)
        float(x[0]), x.tolist(), repr(x)
    assert report.total == 0


def test_an_ndarray_operator_with_a_jax_array_keeps_its_meaning(gpu):
    # ndarray + x runs JAX's reflected operator: a JAX array on x's device, not a NumPy read.
    x = fresh(gpu)
    for level in ("allow", "log", "disallow"):
        with ds.transfer_guard(level, host_to_device="allow") as report:
            total, smaller = np.ones(3, dtype=np.float32) + x, np.zeros(3, dtype=np.float32) < x
        assert isinstance(total, jax.Array) and isinstance(smaller, jax.Array)
        assert ds.device_of(total) == ds.device_of(x) and report.total == 0
        np.testing.assert_array_equal(jax.device_get(total), [2.0, 3.0, 4.0])
        assert bool(jax.device_get(smaller).all())


def test_the_hooks_are_gone_after_the_block():
    """After the block everything is as it was before. Where JAX presents virtual GPUs, that is
    devshim's record of host reads (`guard.watch_host_reads`), which stays for the process."""
    originals = np.asarray, np.array, np.asanyarray
    array_type = type(jnp.ones(1))  # made outside: on a GPU default device, making it is a transfer
    ufunc_before = vars(array_type).get("__array_ufunc__")
    recording = bool(ds.settings.virtual_device_count())
    assert (ufunc_before is not None) == recording == all(is_wrapper(f) for f in originals)
    with ds.transfer_guard("disallow"):
        assert np.asarray is not originals[0]
        assert vars(array_type)["__array_ufunc__"] is not ufunc_before
    assert (np.asarray, np.array, np.asanyarray) == originals
    assert vars(array_type).get("__array_ufunc__") is ufunc_before


# ------------------------------------------------------------ values already on the host


@pytest.mark.parametrize("fetch", ["jax.device_get", "ds.to_numpy"])
def test_a_value_already_held_on_the_host_is_read_without_a_new_transfer(gpu, fetch):
    x = fresh(gpu)
    with ds.transfer_guard("disallow") as report:
        host = jax.device_get(x) if fetch == "jax.device_get" else ds.to_numpy(x)
        assert x.tolist() == [1.0, 2.0, 3.0] and "3." in repr(x)
        np.testing.assert_array_equal(np.asarray(x), host)
        np.testing.assert_array_equal(np.add(x, 1), host + 1)
        with pytest.raises(ds.ImplicitTransferError):
            float(x.sum())  # a new array, computed on the device: its value is not on the host
    assert report.total == 1


def test_a_value_read_once_is_held_on_the_host_as_jax_holds_it(gpu):
    """JAX's rule, on a real GPU and on virtual GPUs alike: once a value has been read to the host
    (implicitly, or started with copy_to_host_async), reading it again is no transfer."""
    x, y = fresh(gpu), fresh(gpu)
    with quiet():
        with ds.transfer_guard("log") as report:
            first, again = x.tolist(), x.tolist()
            y.copy_to_host_async()
            np.asarray(y), y.tolist()
    assert first == again == [1.0, 2.0, 3.0]
    assert [event.what for event in report.events] == ["x.tolist()", "x.copy_to_host_async()"]


def test_an_explicit_read_inside_a_log_block_marks_only_that_array(gpu):
    x, y = fresh(gpu), fresh(gpu)
    with quiet():
        with ds.transfer_guard("log") as report:
            jax.device_get(x)
            x.tolist(), y.tolist()
    assert report.total == 1 and report.events[0].what == "x.tolist()"


# ------------------------------------------------------------ host to device


HOST_TO_DEVICE = [
    ("jnp.ones(1)", lambda: jnp.ones(1), "convert_element_type"),
    ("jnp.asarray(ndarray)", lambda: jnp.asarray(np.arange(3.0)), "float"),
    ("a jitted call on a NumPy argument", lambda: jax.jit(lambda a: a * 2)(np.arange(3.0)), "jit("),
]


def jax_calls_it_implicit(make) -> bool:
    """Whether JAX's own guard counts ``make()`` as an implicit host-to-device transfer. Before
    JAX 0.10 ``jnp.asarray(ndarray)`` is JAX's own ``jax.device_put`` (explicit: measured on
    0.4.31 and 0.7.2); from 0.10 it is implicit."""
    with jax.transfer_guard_host_to_device("disallow"):
        try:
            make()
        except JAX_REFUSAL:
            return True
    return False


@pytest.mark.parametrize("what, make, named", HOST_TO_DEVICE, ids=[w for w, _, _ in HOST_TO_DEVICE])
def test_host_data_sent_to_a_gpu_default_device_is_refused_logged_and_counted(on_gpu, what, make, named):
    if not jax_calls_it_implicit(make):
        pytest.skip(f"this JAX makes {what} an explicit jax.device_put (the next test checks devshim agrees)")
    with ds.transfer_guard("disallow") as report:
        with pytest.raises(ds.ImplicitTransferError, match="host-to-device") as info:
            make()
    assert str(ds.neutral_device(fresh(on_gpu))) in str(info.value) and named in str(info.value)
    assert report.counts["host-to-device"] == 1 and report.events[0].action == "refused"
    assert report.events[0].site.startswith(__file__)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ds.ImplicitTransferWarning)
        with ds.transfer_guard("log") as report:
            made = make()
    assert report.counts == {"cross-device op input": 0, "device-to-host read": 0, "host-to-device": 1}
    assert report.events[0].action == "logged" and str(report.events[0].target) == str(ds.neutral_device(made))
    assert any(issubclass(w.category, ds.ImplicitTransferWarning) for w in caught)
    assert ds.device_of(made) == ds.device_of(fresh(on_gpu))
    with ds.transfer_guard("disallow", host_to_device="allow") as report:
        again = make()
    np.testing.assert_array_equal(jax.device_get(again), jax.device_get(made))
    assert report.total == 0


@pytest.mark.parametrize("what, make, named", HOST_TO_DEVICE, ids=[w for w, _, _ in HOST_TO_DEVICE])
def test_devshim_counts_host_data_as_implicit_exactly_where_jax_does(on_gpu, what, make, named):
    implicit_for_jax = jax_calls_it_implicit(make)
    with ds.transfer_guard("log") as report:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ds.ImplicitTransferWarning)
            make()
    assert report.counts["host-to-device"] == (1 if implicit_for_jax else 0)


def test_every_call_of_a_compiled_function_is_counted_not_only_the_first(on_gpu):
    # JAX runs calls it has seen before in C++; a block that checks host-to-device sees each one.
    double = jax.jit(lambda a: a * 2)
    for _ in range(3):
        double(np.arange(3.0))  # compiled, and cached for JAX's fast path, before the block
    with quiet():
        with ds.transfer_guard("log") as report:
            for _ in range(5):
                double(np.arange(3.0))
    assert report.counts["host-to-device"] == 5
    with ds.transfer_guard("disallow"):
        for _ in range(2):
            with pytest.raises(ds.ImplicitTransferError):
                double(np.arange(3.0))
    assert jax.device_get(double(np.arange(3.0))).tolist() == [0.0, 2.0, 4.0]  # after: as before


def test_numbers_and_host_arrays_joining_a_gpu_array_are_host_to_device_whatever_the_default(gpu):
    # The data goes where the computation runs: x's GPU, though JAX's default device is the host.
    x = fresh(gpu)
    joins = [("x + 1", lambda: x + 1), ("x[0]", lambda: x[0]),
             ("a jitted call on x and a NumPy array", lambda: jax.jit(lambda a, b: a + b)(x, np.ones(3, np.float32)))]
    for what, join in joins:
        with ds.transfer_guard("disallow") as report:
            with pytest.raises(ds.ImplicitTransferError):
                join()
        assert report.counts["host-to-device"] == 1, what
        assert str(report.events[0].target) == str(ds.neutral_device(x)), what
        with ds.transfer_guard("disallow", host_to_device="allow"):
            assert ds.device_of(join()) == ds.device_of(x), what


def test_arguments_jax_does_not_send_are_not_counted(on_gpu):
    x = fresh(on_gpu)
    ignore_second = jax.jit(lambda a, b: a)
    scale = jax.jit(lambda a, n: a * n, static_argnums=1)
    with ds.transfer_guard("disallow") as report:
        ignore_second(x, np.ones(2))  # an argument the computation does not use is never sent
        scale(x, 3)  # a static argument is part of the compiled program, not an input
        scale(x, 3)
    assert report.total == 0


@pytest.mark.parametrize("what, make, named", HOST_TO_DEVICE, ids=[w for w, _, _ in HOST_TO_DEVICE])
def test_host_data_kept_on_a_host_default_device_is_no_transfer(what, make, named):
    with jax.default_device(ds.cpu()):
        with ds.transfer_guard("disallow") as report:
            made = make()
    assert ds.device_of(made) == ds.device("cpu") and report.total == 0


def test_explicit_transfers_pass_under_disallow_with_a_gpu_default(on_gpu):
    x = fresh(ds.cpu())
    with ds.transfer_guard("disallow") as report:
        on_device = ds.to_device(x, on_gpu)
        put = jax.device_put(np.arange(3.0), on_gpu)  # JAX's explicit API
        back = ds.to_device(on_device, ds.cpu())
        same = ds.copy_if_needed({"a": on_device}, on_gpu)["a"]
        host = ds.to_numpy(on_device)
    assert report.total == 0 and same is on_device
    assert ds.device_of(back) == ds.device("cpu") and ds.device_of(put) == ds.device_of(on_device)
    np.testing.assert_array_equal(host, [1.0, 2.0, 3.0])


# ------------------------------------------------------------ JAX's own guards, per block and thread


def jax_levels():
    config = jax.config
    return (config.jax_transfer_guard_device_to_host, config.jax_transfer_guard_device_to_device,
            config.jax_transfer_guard_host_to_device)


def test_each_block_sets_jaxs_own_guards_and_restores_them(gpu):
    before = jax_levels()
    with jax.default_device(gpu):
        with ds.transfer_guard("disallow", device_to_device="log"):
            assert jax_levels() == ("disallow", "log", "disallow")
            with ds.transfer_guard("allow"):
                assert jax_levels() == ("allow", "allow", "allow")
            assert jax_levels() == ("disallow", "log", "disallow")
    assert jax_levels() == before


def test_with_a_host_default_device_jaxs_host_to_device_guard_is_left_alone():
    before = jax_levels()
    with jax.default_device(ds.cpu()):
        with ds.transfer_guard("disallow"):
            assert jax_levels()[:2] == ("disallow", "disallow") and jax_levels()[2] == before[2]
            assert float(jnp.arange(3.0)[1] + 1) == 2.0  # scalars and indices: host data to the host


def test_a_block_sets_jaxs_guards_in_its_own_thread_only():
    seen = {}
    entered, done = threading.Event(), threading.Event()

    def other():
        entered.wait(timeout=30)
        seen["other"] = jax_levels()
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    before = jax_levels()
    with ds.transfer_guard("disallow"):
        seen["inside"] = jax_levels()
        entered.set()
        done.wait(timeout=30)
    thread.join(timeout=30)
    assert seen["inside"][0] == "disallow" and seen["other"] == before


# ------------------------------------------------------------ JAX's refusals as devshim's errors


def test_a_refusal_by_jaxs_own_guard_leaves_the_block_as_devshims_error(gpu):
    # An uncommitted array joining one committed to another device is moved there by JAX:
    # a device-to-device copy that JAX's own guard, set by the block, refuses in C++. (JAX's
    # default device is GPU 0, virtual or real: the loose array is made on the CPU instead.)
    with jax.default_device(ds.cpu()):
        loose = jnp.ones(3)
    pinned = fresh(gpu)
    add = jax.jit(lambda a, b: a + b)
    with pytest.raises(ds.DeviceMismatchError, match="device-to-device") as info:
        with ds.transfer_guard("disallow") as report:
            try:
                add(loose, pinned)
            except JAX_REFUSAL as inside:  # inside the block: JAX's own error
                seen_inside = inside
                raise
    assert isinstance(seen_inside, RuntimeError) and not isinstance(seen_inside, ds.DevshimError)
    assert info.value.__cause__ is seen_inside and "Disallowed device-to-device" in str(info.value)
    assert report.events[0].direction == "device_to_device" and report.events[0].action == "refused"
    assert str(report.events[0].target) == str(ds.neutral_device(pinned))
    with ds.transfer_guard("disallow", device_to_device="allow") as report:
        total = add(loose, pinned)
    assert ds.device_of(total) == ds.device_of(pinned) and report.total == 0


def test_other_errors_leave_the_block_untouched(gpu):
    x = jnp.ones(3)
    with pytest.raises(TypeError):
        with ds.transfer_guard("disallow"):
            x + "text"
    with pytest.raises(KeyError):
        with ds.transfer_guard("disallow"):
            raise KeyError("mine")


# ------------------------------------------------------------ levels and nesting, as JAX's own guard has them


def test_an_inner_allow_block_lets_host_data_through_until_it_ends(on_gpu):
    with ds.transfer_guard("disallow"):
        with ds.transfer_guard("allow") as inner:
            jnp.ones(1)
        assert inner.total == 0
        with pytest.raises(ds.ImplicitTransferError):
            jnp.ones(1)


def test_one_direction_and_all_directions_nest_both_ways(on_gpu):
    with ds.transfer_guard(host_to_device="disallow"):
        with ds.transfer_guard("allow"):
            jnp.ones(1)
        with pytest.raises(ds.ImplicitTransferError):
            jnp.ones(1)
    with ds.transfer_guard("disallow"):
        with ds.transfer_guard(host_to_device="allow"):
            jnp.ones(1)
        with pytest.raises(ds.ImplicitTransferError):
            jnp.ones(1)


def test_outside_every_block_all_three_directions_are_allowed(gpu):
    before = jax_levels()
    with jax.default_device(gpu):
        jnp.ones(1), jax.jit(lambda a: a)(np.ones(1))
        moved = jax.jit(lambda a, b: a + b)(jnp.ones(1), fresh(gpu, (1.0,)))
        float(moved[0]), np.asarray(fresh(gpu)), str(fresh(gpu))
    assert jax_levels() == before


def test_explicit_transfers_in_every_direction_are_neither_logged_nor_refused(on_gpu):
    other = ds.try_gpu(1) if ds.num_gpus() > 1 else ds.cpu()
    x = fresh(on_gpu)
    for level in ("log", "disallow"):
        with ds.transfer_guard(level) as report:
            jax.device_put(np.ones(4))  # host to device
            jax.device_put(x, other)  # device to device
            jax.device_get(fresh(on_gpu))  # device to host
        assert report.total == 0, level


DEVICE_TO_HOST = [
    ("x.copy_to_host_async()", lambda x: x.copy_to_host_async()),
    ("print(x) / str(x)", str),
    ("pickle.dumps(x)", pickle.dumps),
]  # with NumPy's reads (NUMPY_READS, above): JAX's own device-to-host cases


@pytest.mark.parametrize("what, read", DEVICE_TO_HOST, ids=[w for w, _ in DEVICE_TO_HOST])
def test_device_to_host_reads_jax_guards_are_refused_or_logged(gpu, what, read):
    with ds.transfer_guard("disallow") as report:
        with pytest.raises(ds.ImplicitTransferError):
            read(fresh(gpu))
    assert report.events[0].what == what
    with quiet():
        with ds.transfer_guard("log") as report:
            read(fresh(gpu))
    assert report.total == 1 and report.events[0].action == "logged"


def test_levels_devshim_does_not_have_are_refused_by_name():
    for level in ("log_explicit", "disallow_explicit"):
        with pytest.raises(ds.InvalidGuardLevelError):
            ds.transfer_guard(level)


def test_the_process_default_refuses_host_data_joining_a_gpu_array_on_every_call(gpu, setenv):
    x = fresh(gpu)
    add_one = jax.jit(lambda a: a + np.float32(1))
    bump = jax.jit(lambda a, b: a + b)
    bump(x, np.ones(3, np.float32))  # compiled, with a fast path, before the default checks
    setenv("DEVSHIM_TRANSFER_GUARD", "disallow")
    for _ in range(3):
        with pytest.raises(ds.ImplicitTransferError):
            bump(x, np.ones(3, np.float32))
    on_host = jax.device_put(np.zeros(1, np.float32), ds.cpu())  # explicit: not refused
    assert float(jax.device_get(add_one(on_host)[0])) == 1.0  # host data onto the host CPU
    setenv("DEVSHIM_TRANSFER_GUARD", None)
    assert jax.device_get(bump(x, np.ones(3, np.float32))).tolist() == [2.0, 3.0, 4.0]


# ------------------------------------------------------------ JAX's own transfer-guard tests, case by case
# JAX's tests/transfer_guard_test.py in devshim's words: its transfers in the three directions
# (each explicit or implicit, as JAX counts them), under ds.transfer_guard for one direction and
# for all three, at each level, by default, nested, mixed, and the case whose first read is made
# under "allow" (a value read to the host once is read again without a transfer). JAX runs the
# device-to-host ones on a GPU only (its CPU reads copy nothing); devshim runs them on virtual GPUs
# too, as a GPU. JAX's "log_explicit" and "disallow_explicit" levels devshim refuses by name
# (test_levels_devshim_does_not_have_are_refused_by_name, above).


def host_to_device_transfers(gpu):
    """(what, explicit, transfer) for host data going to the default device, a GPU."""
    return [
        ("jax.device_put(ndarray)", True, lambda: jax.device_put(np.ones(10))),
        ("a jitted identity on an ndarray", False, lambda: jax.jit(lambda x: x)(np.ones(1))),
        ("jnp.ones(1)", False, lambda: jnp.ones(1)),
    ]


def device_to_device_transfers(gpu):
    """Arrays made on GPU 0 sent to GPU 1: by `jax.device_put`, or by a jitted computation that
    runs there (JAX moves an array made without a device where the computation runs; JAX's test
    names the device with jit's deprecated `device=`, here the default device does)."""
    if ds.num_gpus() < 2:
        return []
    other = ds.try_gpu(1)
    with ds.transfer_guard(host_to_device="allow"):
        arrays = [jnp.ones(1) for _ in range(2)]

    def jitted_there():
        with jax.default_device(other):
            return jax.jit(lambda x: x)(arrays[1])

    return [("jax.device_put(x, GPU 1)", True, lambda: jax.device_put(arrays[0], other)),
            ("a jitted identity run on GPU 1", False, jitted_there)]


def device_to_host_transfers(gpu):
    """An array on the GPU each, read to the host: explicitly by `jax.device_get`, implicitly by
    NumPy, by starting its copy, by printing and by pickling it."""
    with ds.transfer_guard(host_to_device="allow"):
        arrays = [jnp.ones(1) for _ in range(6)]
    return [
        ("jax.device_get(x)", True, lambda: jax.device_get(arrays[0])),
        ("np.asarray(x)", False, lambda: np.asarray(arrays[1])),
        ("x.copy_to_host_async()", False, lambda: arrays[2].copy_to_host_async()),
        ("np.add(x, 1)", False, lambda: np.add(arrays[3], 1)),
        ("str(x)", False, lambda: str(arrays[4])),
        ("pickle.dumps(x)", False, lambda: pickle.dumps(arrays[5])),
    ]


def all_transfers(gpu):
    return host_to_device_transfers(gpu) + device_to_device_transfers(gpu) + device_to_host_transfers(gpu)


def one_direction(direction):
    return lambda level: ds.transfer_guard(**{direction: level})


#: (name, the transfers, the guard of that direction at a level): JAX's parameters, in devshim's words.
DIRECTIONS = [
    ("host_to_device", host_to_device_transfers, one_direction("host_to_device")),
    ("device_to_device", device_to_device_transfers, one_direction("device_to_device")),
    ("device_to_host", device_to_host_transfers, one_direction("device_to_host")),
    ("all", all_transfers, ds.transfer_guard),
]
_IDS = [name for name, _, _ in DIRECTIONS]
REFUSED = (ds.ImplicitTransferError, ds.DeviceMismatchError)


def test_jax_case_simple(on_gpu):
    with ds.transfer_guard("allow") as report:
        jnp.ones(1)
    assert report.total == 0
    with quiet():
        with ds.transfer_guard("log") as report:
            jnp.ones(1)
    assert report.total == 1 and report.events[0].action == "logged"
    with pytest.raises(ds.ImplicitTransferError):
        with ds.transfer_guard("disallow"):
            jnp.ones(1)


def test_jax_case_nesting(on_gpu):
    with ds.transfer_guard("disallow"):
        with ds.transfer_guard("allow"):
            jnp.ones(1)
        with pytest.raises(ds.ImplicitTransferError):
            jnp.ones(1)


def test_jax_case_mixed_nesting(on_gpu):
    with ds.transfer_guard(host_to_device="disallow"):
        with ds.transfer_guard("allow"):
            jnp.ones(1)
        with pytest.raises(ds.ImplicitTransferError):
            jnp.ones(1)
    with ds.transfer_guard("disallow"):
        with ds.transfer_guard(host_to_device="allow"):
            jnp.ones(1)
        with pytest.raises(ds.ImplicitTransferError):
            jnp.ones(1)


@pytest.mark.parametrize("name, transfers, guard", DIRECTIONS, ids=_IDS)
def test_jax_case_allow_by_default(on_gpu, name, transfers, guard):
    for _, _, transfer in transfers(on_gpu):
        transfer()  # no guard: every transfer is allowed


@pytest.mark.parametrize("name, transfers, guard", DIRECTIONS, ids=_IDS)
def test_jax_case_allow(on_gpu, name, transfers, guard):
    for what, _, transfer in transfers(on_gpu):
        with guard("allow") as report:
            transfer()
        assert report.total == 0, what


@pytest.mark.parametrize("name, transfers, guard", DIRECTIONS, ids=_IDS)
def test_jax_case_log(on_gpu, name, transfers, guard):
    """Allowed, and an implicit transfer devshim sees (to or from the host) is in the report;
    an explicit one is not. A device-to-device copy is JAX's own guard's to log."""
    for what, explicit, transfer in transfers(on_gpu):
        with quiet():
            with guard("log") as report:
                transfer()
        if explicit:
            assert report.total == 0, what
        elif "GPU 1" not in what:
            assert report.total == 1 and report.events[0].action == "logged", (what, report.events)


@pytest.mark.parametrize("name, transfers, guard", DIRECTIONS, ids=_IDS)
def test_jax_case_disallow(on_gpu, name, transfers, guard):
    for what, explicit, transfer in transfers(on_gpu):
        if explicit:
            with guard("disallow") as report:
                transfer()
            assert report.total == 0, what
        else:
            with pytest.raises(REFUSED):
                with guard("disallow"):
                    transfer()


@pytest.mark.parametrize("name, transfers, guard", [DIRECTIONS[2], (*DIRECTIONS[2][:2], ds.transfer_guard)],
                         ids=["device_to_host", "all"])
def test_jax_case_disallow_ignores_values_already_on_the_host(on_gpu, name, transfers, guard):
    """JAX's test_disallow_ignores_arrays_on_cpu: each read made once under "allow" (the value
    goes to the host), then again under "disallow": allowed, no new transfer."""
    for what, _, transfer in transfers(on_gpu):
        with guard("allow"):
            transfer()
        with guard("disallow") as report:
            transfer()
        assert report.total == 0, what


def test_a_value_read_outside_every_guard_is_held_on_the_host_too(gpu):
    """The same rule when the first read is made with no guard at all, as JAX's is (on virtual
    GPUs devshim's record of reads sees it, guard.watch_host_reads)."""
    for what, _, transfer in device_to_host_transfers(gpu):
        transfer()
        with ds.transfer_guard("disallow") as report:
            transfer()
        assert report.total == 0, what


def test_on_a_real_device_jaxs_own_guard_says_whether_a_read_copies():
    """On a GPU, JAX holds a value it copied once in C++ (after `copy_to_host_async`, where
    `_npy_value` stays None): devshim asks JAX's own guard, set to "disallow", first, and counts
    a read as a transfer only when JAX refuses it (its C++ checks where it copies). Here with
    reads that stand for JAX's: one it lets through, one it refuses, one failing otherwise. A
    virtual GPU is never asked (JAX's guard never checks a CPU device)."""
    from devshim._device import Device
    from devshim.backends.jax import guard

    real, virtual = Device("gpu", 0, backend="jax"), Device("gpu", 0, backend="jax", virtual=True)
    seen = []

    def held():
        seen.append(jax.config.jax_transfer_guard_device_to_host)
        return "value"

    def copies():
        raise JAX_REFUSAL("INVALID_ARGUMENT: Disallowed device-to-host transfer: shape=(3,), dtype=float32")

    def deleted():
        raise JAX_REFUSAL("INVALID_ARGUMENT: Array has been deleted.")

    assert guard._held_on_host(real, held) == (True, "value") and seen == ["disallow"]
    assert guard._held_on_host(real, copies) == (False, None)
    with pytest.raises(JAX_REFUSAL, match="deleted"):
        guard._held_on_host(real, deleted)
    assert guard._held_on_host(virtual, held) == (False, None) and seen == ["disallow"]

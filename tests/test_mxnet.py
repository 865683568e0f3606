"""What is specific to the MXNet adapter: both front-ends, Contexts, copyto vs as_in_ctx,
autograd, device ids MXNet itself ignores, and virtual devices backed by cpu(i + 1)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import devshim as ds
from helpers import run_python

mx = pytest.importorskip("mxnet")
from mxnet import autograd, npx  # noqa: E402

from harnesses.mxnet_harness import HARNESS, data_span  # noqa: E402  (also calls npx.set_np())

FRONT_ENDS = {
    "np": lambda values, ctx=None: mx.np.array(np.asarray(values, dtype=np.float32), ctx=ctx),
    "nd": lambda values, ctx=None: mx.nd.array(np.asarray(values, dtype=np.float32), ctx=ctx),
}


@pytest.fixture
def bk():
    with ds.use_backend("mxnet") as adapter:
        yield adapter


@pytest.fixture
def plain(bk):
    """No virtual devices, whatever the environment says (conftest restores them after)."""
    ds.testing.virtual_devices(0)
    return bk


@pytest.fixture
def virtual(bk):
    """Two virtual GPUs for this test only (conftest restores the environment's choice after)."""
    ds.testing.virtual_devices(2)
    return bk


# ------------------------------------------------------------ both front-ends


@pytest.mark.parametrize("front", sorted(FRONT_ENDS))
def test_both_front_ends_dispatch_to_mxnet_whatever_backend_is_selected(front):
    x = FRONT_ENDS[front]([1.0, 2.0])
    with ds.use_backend("numpy"):
        d = ds.neutral_device(x)
        y = ds.to_device(x, mx.cpu())
    assert (d.backend, str(d), d.native) == ("mxnet", "cpu:0", mx.cpu(0))
    assert type(y) is type(x)
    np.testing.assert_array_equal(ds.to_numpy(y), [1.0, 2.0])


@pytest.mark.parametrize("front", sorted(FRONT_ENDS))
def test_copies_keep_the_front_end_and_the_dtype(front, plain):
    x = FRONT_ENDS[front]([[1.0, 2.0]]).astype("float16")
    for y in (ds.to_device(x, mx.cpu(1)), ds.copy_if_needed(x, mx.cpu(1))):
        assert type(y) is type(x) and y.dtype == np.float16 and y.shape == (1, 2)
        assert y.ctx == mx.cpu(1)


def test_a_mixed_nest_of_front_ends_and_numpy(plain):
    batch = {"np": mx.np.ones((2,), ctx=mx.cpu(1)), "nd": mx.nd.ones((2,), ctx=mx.cpu(1)),
             "host": np.ones(2), "tag": "t"}
    moved = ds.to_device(batch, mx.cpu())
    assert moved["np"].ctx == moved["nd"].ctx == mx.cpu(0)
    # a NumPy array sent to an MXNet Context becomes an MXNet array there (docs/tensors.md)
    assert type(moved["host"]) is mx.np.ndarray and moved["host"].ctx == mx.cpu(0)
    assert ds.to_numpy(moved["host"]).tolist() == [1.0, 1.0]
    assert moved["tag"] == "t"
    assert ds.same_device(moved["np"], moved["nd"])


# ------------------------------------------------------------ devices are Contexts


def test_devices_are_contexts_the_framework_accepts(plain):
    assert isinstance(ds.cpu(), mx.Context) and ds.cpu() == mx.cpu(0)
    assert ds.num_gpus() == mx.context.num_gpus()
    assert mx.np.ones((2, 3), ctx=ds.try_gpu()).ctx == ds.try_gpu()
    assert mx.nd.ones((2, 3), ctx=ds.try_gpu()).ctx == ds.try_gpu()
    ctx = mx.cpu(0)
    assert ds.device(ctx) is ctx and ds.device("cpu(0)") == ctx


def test_every_cpu_context_is_usable_without_virtual_devices(plain):
    assert ds.device("cpu:3") == mx.cpu(3)
    assert ds.neutral_device(mx.np.ones(1, ctx=mx.cpu(3))) == ds.Device("cpu", 3)


@pytest.mark.skipif(mx.context.num_gpus() > 0, reason="this machine has a GPU")
def test_gpu_on_a_cpu_only_machine_says_how_many_there_are(plain):
    with pytest.raises(ds.DeviceUnavailableError, match="sees 0 GPUs"):
        ds.gpu(0)
    assert ds.try_gpu() == mx.cpu(0) and ds.try_all_gpus() == [mx.cpu(0)]


def test_mps_is_refused_because_mxnet_accelerators_are_cuda(plain):
    with pytest.raises(ds.DeviceUnavailableError, match="CUDA GPUs only"):
        ds.device("mps")


def test_pinned_host_memory_counts_as_the_cpu(plain):
    x = mx.nd.ones((2,), ctx=mx.cpu_pinned(0))
    d = ds.neutral_device(x)
    assert (str(d), d.platform, d.native) == ("cpu:0", "cpu_pinned", mx.cpu_pinned(0))
    assert ds.same_device(x, mx.nd.ones((2,)))
    assert ds.copy_if_needed(x, ds.cpu()) is x


# ------------------------------------------------------------ copyto vs as_in_ctx


@pytest.mark.parametrize("front", sorted(FRONT_ENDS))
def test_to_device_is_copyto_new_storage_even_on_the_same_context(front, plain):
    x = FRONT_ENDS[front]([1.0, 2.0, 3.0])
    y = ds.to_device(x, x.ctx)
    assert y is not x and y.ctx == x.ctx
    assert not HARNESS.aliases(x, y)
    y[:] = 7.0
    np.testing.assert_array_equal(x.asnumpy(), [1.0, 2.0, 3.0])


@pytest.mark.parametrize("front", sorted(FRONT_ENDS))
def test_copy_if_needed_is_as_in_ctx_identity_when_there(front, plain):
    x = FRONT_ENDS[front]([1.0, 2.0])
    for spec in (mx.cpu(), mx.cpu(0), "cpu(0)", "cpu", ds.Device("cpu")):
        assert ds.copy_if_needed(x, spec) is x
    moved = ds.copy_if_needed(x, mx.cpu(1))
    assert moved is not x and moved.ctx == mx.cpu(1) and not HARNESS.aliases(x, moved)


def test_the_harness_alias_check_sees_real_views():
    """The conformance suite's no-alias checks are only worth something if this can say True."""
    x = mx.np.arange(6.0).reshape(2, 3)
    assert HARNESS.aliases(x, x[1]) and HARNESS.aliases(x[0:2], x[1])
    assert not HARNESS.aliases(x[0], x[1])
    assert not HARNESS.aliases(x, x.copy())
    start, size = data_span(x[1])
    assert size == 3 * 4 and start == data_span(x)[0] + 3 * 4


def test_reading_a_pending_copys_address_keeps_its_values():
    """MXNDArrayGetData on an array the engine is still writing used to lose the write.

    It allocates the array's storage on the calling thread while the engine allocates it
    for the copy; unwaited, about 1 read in 150 gave back uninitialised memory (CI saw it
    in the hostile-nest property test). devshim's interop pointer and the harness wait.
    """
    from devshim.conversion import interop_for

    mxnet = ds.get_backend("mxnet")
    pointer = interop_for(mxnet).pointer
    expected = np.array([0.0, 1.5, 0.0], dtype=np.float32)
    readers = {"devshim's interop pointer": lambda y: pointer(mxnet, y), "the harness's data_span": data_span}
    lost = dict.fromkeys(readers, 0)
    for _ in range(1500):
        for name, read_address in readers.items():
            y = ds.to_device(mx.np.array(expected), ds.cpu())
            read_address(y)
            lost[name] += not np.array_equal(y.asnumpy(), expected)
    assert lost == dict.fromkeys(readers, 0)


@pytest.mark.parametrize("front", sorted(FRONT_ENDS))
def test_to_numpy_is_asnumpy_a_host_copy(front, virtual):
    x = FRONT_ENDS[front]([1.0, 2.0], ds.gpu(1))
    host = ds.to_numpy(x)
    assert type(host) is np.ndarray and host.dtype == np.float32
    host[0] = 50.0
    np.testing.assert_array_equal(x.asnumpy(), [1.0, 2.0])


# ------------------------------------------------------------ autograd


@pytest.mark.parametrize("front", sorted(FRONT_ENDS))
@pytest.mark.parametrize("fn", [ds.to_device, ds.copy_if_needed], ids=["to_device", "copy_if_needed"])
def test_gradients_flow_back_across_devices_under_record(front, fn, virtual):
    x = FRONT_ENDS[front]([1.0, 2.0, 3.0], ds.gpu(0))
    x.attach_grad()
    with autograd.record():
        there = fn(x * 2.0, ds.gpu(1))
        loss = (there * there).sum()
    loss.backward()
    assert there.ctx == mx.cpu(2)
    np.testing.assert_allclose(x.grad.asnumpy(), 8.0 * np.array([1.0, 2.0, 3.0]))
    assert x.grad.ctx == x.ctx


# ------------------------------------------------------------ ids MXNet ignores


def test_mxnet_ignores_context_ids_but_devshim_does_not(plain):
    x = mx.np.ones((2,), ctx=mx.cpu(0))
    y = mx.np.ones((2,), ctx=mx.cpu(1))
    (x + y).wait_to_read()  # MXNet runs this without complaint
    assert not ds.same_device(x, y)
    with pytest.raises(ds.DeviceMismatchError, match=r"cpu:0.*cpu:1"):
        ds.ensure_same_device(x, y)
    assert ds.ensure_same_device(x, ds.copy_if_needed(y, mx.cpu(0))) == mx.cpu(0)


def test_cpu0_and_a_virtual_gpu_are_different_devices(virtual):
    x = mx.np.ones((2,), ctx=ds.cpu())
    y = mx.np.ones((2,), ctx=ds.gpu(0))
    assert y.ctx == mx.cpu(1)
    assert not ds.same_device(x, y)
    with pytest.raises(ds.DeviceMismatchError, match=r"gpu:0.*virtual=True"):
        ds.ensure_same_device(x, y)


# ------------------------------------------------------------ virtual devices


def test_virtual_gpu_i_is_cpu_i_plus_1_and_cpu0_stays_the_host(virtual):
    assert ds.num_gpus() == 2
    assert ds.cpu() == mx.cpu(0)
    assert ds.try_all_gpus() == [mx.cpu(1), mx.cpu(2)]
    assert ds.devices() == [mx.cpu(0), mx.cpu(1), mx.cpu(2)]
    assert ds.try_gpu(1) == ds.gpu(1) == ds.device("gpu(1)") == ds.device("cuda:1") == mx.cpu(2)
    assert ds.try_gpu(2) == mx.cpu(0)
    d = ds.neutral_device(mx.nd.ones((1,), ctx=ds.try_gpu(1)))
    assert (str(d), d.virtual, d.native) == ("gpu:1", True, mx.cpu(2))
    assert repr(d) == "Device('gpu:1', backend='mxnet', virtual=True)"
    assert d != ds.Device("gpu", 1) and d == ds.Device("gpu", 1, virtual=True)


def test_a_real_gpu_context_is_not_a_virtual_gpu(virtual):
    for native in (mx.gpu(0), mx.gpu(1)):
        with pytest.raises(ds.DeviceUnavailableError, match="real GPU"):
            ds.device(native)
        with pytest.raises(ds.DeviceUnavailableError, match="real GPU"):
            ds.to_device(mx.np.ones(1), native)
    assert ds.device("gpu(1)") == mx.cpu(2)  # the spec string means the backend's gpu:1


def test_host_contexts_behind_virtual_gpus_are_not_cpus(virtual):
    with pytest.raises(ds.DeviceUnavailableError, match=r"cpu\(2\) backs virtual gpu:1"):
        ds.device("cpu:2")
    assert ds.device("cpu:3") == mx.cpu(3)  # past the virtual GPUs: an ordinary CPU context
    with pytest.raises(ds.DeviceUnavailableError, match="sees 2 GPUs"):
        ds.gpu(2)


def test_devshim_device_cpu_hides_virtual_gpus_too(virtual, setenv):
    setenv("DEVSHIM_DEVICE", "cpu")
    assert ds.num_gpus() == 0 and ds.try_all_gpus() == [mx.cpu(0)]


def test_asking_for_virtual_devices_again_is_harmless(virtual):
    for _ in range(3):
        assert ds.num_gpus() == 2
    ds.testing.virtual_devices(3)
    assert ds.try_all_gpus() == [mx.cpu(1), mx.cpu(2), mx.cpu(3)]


def test_the_d2l_mxnet_flow_on_virtual_devices(virtual):
    X = mx.np.ones((2, 3), ctx=ds.try_gpu())
    Y = mx.np.random.uniform(size=(2, 3), ctx=ds.try_gpu(1))
    assert (str(ds.neutral_device(X)), str(ds.neutral_device(Y))) == ("gpu:0", "gpu:1")
    Z = ds.to_device(X, ds.try_gpu(1))
    assert ds.neutral_device(Z) == ds.neutral_device(Y) != ds.neutral_device(X)
    np.testing.assert_allclose((Y + Z).asnumpy(), Y.asnumpy() + 1.0)
    assert ds.copy_if_needed(Z, ds.try_gpu(1)) is Z
    assert Z.as_in_ctx(ds.try_gpu(1)) is Z  # what the chapter writes, for comparison


def test_the_d2l_mxnet_flow_from_the_environment_variable():
    """The same flow in a fresh interpreter, configured only by environment variables."""
    result = run_python(
        """
        from mxnet import np, npx
        import devshim as ds
        npx.set_np()
        X = np.ones((2, 3), ctx=ds.try_gpu())
        Y = np.ones((2, 3), ctx=ds.try_gpu(1))
        Z = ds.to_device(X, ds.try_gpu(1))
        assert ds.copy_if_needed(Z, ds.try_gpu(1)) is Z
        print(ds.num_gpus(), X.ctx, Y.ctx, Z.ctx, ds.same_device(X, Y), ds.same_device(Y, Z),
              float((Y + Z).sum()))
        """,
        DEVSHIM_BACKEND="mxnet", DEVSHIM_VIRTUAL_DEVICES="2",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "cpu(1)", "cpu(2)", "cpu(2)", "False", "True", "12.0"]


def test_info_lists_the_virtual_gpus():
    result = run_python(
        "import sys; from devshim.cli import main; sys.exit(main(['info']))",
        DEVSHIM_BACKEND="mxnet", DEVSHIM_VIRTUAL_DEVICES="2",
    )
    assert result.returncode == 0, result.stderr
    section = result.stdout.split("\ndevices:\n", 1)[1].split("\n\n", 1)[0]  # not the memory table
    lines = [line.split() for line in section.splitlines() if line.strip().startswith("mxnet")]
    devices = [line for line in lines if line[1] in ("cpu:0", "gpu:0", "gpu:1")]
    assert [line[1:3] for line in devices] == [["cpu:0", "cpu(0)"], ["gpu:0", "cpu(1)"], ["gpu:1", "cpu(2)"]]
    assert [line[-1] == "(virtual)" for line in devices] == [False, True, True]


# ------------------------------------------------------------ engine and threads


def test_synchronize_waits_for_the_whole_engine(bk, monkeypatch):
    calls = []
    monkeypatch.setattr(mx.nd, "waitall", lambda: calls.append("waitall"))
    bk.synchronize(None)
    bk.synchronize(mx.cpu())
    assert calls == ["waitall", "waitall"]


def test_threads_without_set_np_copy_np_arrays(plain):
    """npx.set_np() is per thread; devshim must not depend on the caller's mode."""
    x = mx.np.arange(6.0).reshape(2, 3)
    results, errors = [None] * 8, []

    def work(i):
        try:
            assert not npx.is_np_array()
            y = ds.to_device(x, mx.cpu(i))
            results[i] = (type(y), y.ctx, ds.copy_if_needed(y, mx.cpu(i)) is y, ds.to_numpy(y))
        except Exception as err:  # reported below, with the thread's index
            errors.append((i, repr(err)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for i, (kind, ctx, same, host) in enumerate(results):
        assert kind is mx.np.ndarray and ctx == mx.cpu(i) and same
        np.testing.assert_array_equal(host, np.arange(6.0).reshape(2, 3))


def test_sparse_arrays_dispatch_and_keep_their_storage_type(plain):
    dense = np.array([[0.0, 1.0], [2.0, 0.0]], dtype=np.float32)
    csr = mx.nd.array(dense).tostype("csr")
    moved = ds.to_device(csr, mx.cpu(1))
    assert moved.stype == "csr" and moved.ctx == mx.cpu(1)
    assert ds.copy_if_needed(csr, mx.cpu(0)) is csr
    np.testing.assert_array_equal(ds.to_numpy(moved), dense)


def test_a_0d_or_empty_np_array_copies_to_another_context_without_set_np():
    """MXNet's shape inference reads () and 0 as unknown unless NumPy shapes are on (this
    module's harness turns them on, so the check runs in a fresh interpreter)."""
    code = (
        "import mxnet as mx, devshim as ds\n"
        "assert not mx.util.is_np_shape()\n"
        "with mx.util.np_shape(True):\n"
        "    empty = mx.np.zeros((0, 2))  # MXNet cannot even make one without NumPy shapes\n"
        "for value in (mx.np.array(3.0), empty):\n"
        "    copied = ds.to_device(value, mx.cpu(1))\n"
        "    assert copied.ctx == mx.cpu(1) and copied.shape == value.shape, copied\n"
        "    assert (ds.to_numpy(copied) == ds.to_numpy(value)).all()\n"
        "assert not mx.util.is_np_shape()\n"
        "print('ok')\n"
    )
    result = run_python(code, DEVSHIM_BACKEND="mxnet", DEVSHIM_VIRTUAL_DEVICES="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


def test_an_import_numpy_refuses_frees_the_exported_array(monkeypatch):
    """NumPy 1.23 refuses MXNet's bool DLPack capsule; ds.convert then copies.

    The refused capsule used to be dropped inside NumPy while its error was set, so
    MXNet's deleter (a ctypes callback) raised SystemError instead of running, and each
    such conversion leaked the source array's memory (4 MB a call for 4 MB arrays).
    """
    import gc
    import os

    unraisable = []
    monkeypatch.setattr("sys.unraisablehook", unraisable.append)

    def resident_mb():  # Linux's count; elsewhere the unraisable check below still holds
        try:
            with open("/proc/self/statm") as statm:
                return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        except OSError:
            return 0.0

    size_mb, calls = 8, 40
    before = resident_mb()
    for _ in range(calls):
        y = ds.convert(mx.np.array(np.ones(size_mb * 2**20, dtype=bool), dtype="bool"), "numpy")
        assert type(y) is np.ndarray and y.dtype == np.bool_ and y.all()
        del y
    gc.collect()
    mx.nd.waitall()
    assert [u.exc_value for u in unraisable] == []
    assert resident_mb() - before < size_mb * calls / 4  # a leak would keep all 320 MB

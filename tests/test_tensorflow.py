"""What is specific to the TensorFlow adapter: device objects that are also ``with`` scopes,
fully qualified device strings, variables, GradientTape, tf.function, and virtual devices that
must be configured before TensorFlow initialises."""

from __future__ import annotations

import copy
import inspect
import os
import pickle
import types

import numpy as np
import pytest

import devshim as ds

tf = pytest.importorskip("tensorflow")
from devshim.backends.tensorflow.core import TFDevice  # noqa: E402
from helpers import run_python as run_fresh  # noqa: E402

# Importing the harness applies DEVSHIM_VIRTUAL_DEVICES before any tensor below exists.
from harnesses.tensorflow_harness import HARNESS  # noqa: E402

needs_gpu = pytest.mark.skipif(
    not tf.config.list_physical_devices("GPU"), reason="needs a GPU visible to TensorFlow"
)


@pytest.fixture(autouse=True)
def bk():
    with ds.use_backend("tensorflow") as adapter:
        yield adapter


def run_python(code: str, **env: str):
    """Run ``code`` in a fresh interpreter (a fresh TensorFlow) with only ``env``'s DEVSHIM_ vars."""
    return run_fresh(code, DEVSHIM_BACKEND="tensorflow", **env)


def tf_name(device: TFDevice) -> str:
    """The suffix TensorFlow gives tensors placed on ``device``: "/device:CPU:0"."""
    return "/device:" + str(device)[1:]


# ------------------------------------------------------------ device objects are values


def test_devices_are_tfdevices_that_print_their_tensorflow_name():
    assert isinstance(ds.cpu(), TFDevice)
    assert str(ds.cpu()) == "/CPU:0" and repr(ds.cpu()) == "TFDevice('/CPU:0')"
    assert all(isinstance(d, TFDevice) for d in ds.try_all_gpus() + ds.devices())


def test_tfdevice_equality_and_hash_follow_the_canonical_name():
    a, b = TFDevice("/device:GPU:1"), TFDevice("/job:localhost/replica:0/task:0/device:GPU:1")
    assert a == b and not (a != b) and hash(a) == hash(b) and str(a) == "/GPU:1"
    assert a != TFDevice("/GPU:0") and a != TFDevice("/CPU:1")
    assert len({a, b, TFDevice("/GPU:0"), ds.cpu(), ds.cpu()}) == 3
    # Its value is the canonical name, so it equals that string (and only that spelling).
    assert isinstance(a, str) and a == "/GPU:1" and a != "/device:GPU:1"
    assert pickle.loads(pickle.dumps(a)) == a and type(pickle.loads(pickle.dumps(a))) is TFDevice
    assert copy.copy(a) is a and copy.deepcopy(a) is a


def test_tf_device_accepts_devshim_devices_as_names():
    with tf.device(ds.cpu()):
        x = tf.ones(2)
    assert x.device.endswith("/device:CPU:0")
    assert ds.neutral_device(x) == ds.cpu()


def test_tfdevice_is_immutable():
    with pytest.raises(AttributeError, match="immutable"):
        ds.cpu().name = "/GPU:0"
    with pytest.raises(AttributeError, match="immutable"):
        del ds.cpu()._local


@pytest.mark.parametrize("bad", ["gpu:x", "", "/XLA:0"])
def test_tfdevice_rejects_unreadable_names(bad):
    with pytest.raises(ds.InvalidDeviceError, match="Accepted forms"):
        TFDevice(bad)


@pytest.mark.parametrize("other", ["/TPU:0", "meta", "mps:0"])
def test_tfdevice_rejects_devices_that_are_not_cpus_or_gpus(other):
    with pytest.raises(ds.InvalidDeviceError, match="CPUs and GPUs"):
        TFDevice(other)


def test_tfdevice_compares_with_neutral_devices_both_ways():
    assert ds.Device("cpu", 0) == ds.cpu() and ds.cpu() == ds.Device("cpu", 0)
    assert ds.Device("gpu", 0) != ds.cpu() and ds.cpu() != ds.Device("gpu", 0)


def test_device_accepts_tensorflow_spellings():
    assert ds.device("/job:localhost/replica:0/task:0/device:CPU:0") == ds.cpu()
    assert ds.device("/device:CPU:0") == ds.device("/CPU:0") == ds.cpu()
    assert ds.device(ds.cpu()) is ds.cpu()


def test_cpu_one_is_not_a_cpu_even_when_virtual_devices_use_it():
    with pytest.raises(ds.DeviceUnavailableError, match="cpu:1 is not available"):
        ds.device("cpu:1")


# ------------------------------------------------------------ device objects are scopes


def test_with_try_gpu_places_new_tensors_there():
    dev = ds.try_gpu()
    with dev as entered:
        X = tf.ones((2, 3))
    assert entered is dev
    assert X.device.endswith(tf_name(dev))
    assert ds.neutral_device(X) == dev
    assert ds.neutral_device(X) == ("gpu:0" if ds.num_gpus() else "cpu:0")


def test_scopes_nest_and_the_same_object_can_be_re_entered():
    outer, inner = ds.cpu(), ds.try_gpu()
    with outer:
        with inner:
            with inner:
                a = tf.ones(1)
            b = tf.ones(1)
        c = tf.ones(1)
    assert a.device.endswith(tf_name(inner)) and b.device.endswith(tf_name(inner))
    assert c.device.endswith(tf_name(outer))


def test_a_scope_closes_when_its_block_raises():
    with pytest.raises(ZeroDivisionError):
        with ds.try_gpu():
            1 / 0
    with ds.cpu():
        pass  # the stack of scopes is balanced: entering and leaving again works
    assert tf.ones(1).device.endswith("/device:CPU:0")


def test_one_device_object_used_by_two_threads_keeps_each_threads_scopes():
    """Thread A enters g1 first, thread B second, A leaves first: each must close its own scope."""
    result = run_python("""
        import threading
        import tensorflow as tf
        import devshim as ds

        g0, g1 = ds.try_all_gpus()
        a_inside, b_inside, a_done = threading.Event(), threading.Event(), threading.Event()
        out = {}

        def a():
            with g0:
                with g1:
                    a_inside.set()
                    b_inside.wait(30)
                out["a"] = tf.ones(1)
            a_done.set()

        def b():
            a_inside.wait(30)
            with g1:
                b_inside.set()
                a_done.wait(30)
                out["b inside"] = tf.ones(1)
            out["b"] = tf.ones(1)

        threads = [threading.Thread(target=a), threading.Thread(target=b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(*(str(ds.neutral_device(out[k])) for k in ("a", "b inside", "b")))
    """, DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["gpu:0", "gpu:1", "cpu:0"]


# ------------------------------------------------------------ device_of


def test_device_of_reads_the_fully_qualified_device_string():
    x = tf.constant([1.0])
    assert x.device == "/job:localhost/replica:0/task:0/device:CPU:0"
    d = ds.neutral_device(x)
    assert (d.kind, d.index, d.virtual, d.native) == ("cpu", 0, False, ds.cpu())


def test_a_gpu_device_string_reads_as_that_gpu(bk):
    fake = types.SimpleNamespace(device="/job:localhost/replica:0/task:0/device:GPU:1")
    d = bk.tensor_device(fake)
    assert (d.kind, d.index, d.virtual, d.native) == ("gpu", 1, False, TFDevice("/GPU:1"))


def test_symbolic_tensors_have_no_device_yet():
    @tf.function
    def where(x):
        return ds.neutral_device(x)

    with pytest.raises(ds.UnplacedTensorError, match="tf.function"):
        where(tf.constant(1.0))


def test_autograph_leaves_devshims_code_as_written_inside_a_tf_function():
    """AutoGraph rewrites the Python of what a tf.function calls; devshim's, rewritten, failed
    there (a truth test of a symbolic tensor in its dispatch, once torch's adapter was loaded).
    A `.to` leaf sees who called it: devshim's own source, not AutoGraph's rewrite of it."""
    ds.device_of(tf.constant(1.0))  # TensorFlow's adapter reached TensorFlow (as any eager use does)
    callers = []

    class Leaf:
        def to(self, device):
            callers.append(inspect.stack()[1].filename)
            return self

    @tf.function
    def moved(x):
        return ds.to_device({"x": x, "leaf": Leaf()}, ds.cpu())["x"] * 2.0

    np.testing.assert_array_equal(moved(tf.constant([1.0, 2.0])).numpy(), [2.0, 4.0])
    assert callers and all(os.path.dirname(ds.__file__) in caller for caller in callers), callers


# ------------------------------------------------------------ copies


def test_to_device_is_a_new_tensor_in_new_storage():
    x = tf.constant(np.arange(6.0))
    y = ds.to_device(x, ds.cpu())
    assert y is not x and ds.neutral_device(y) == "cpu"
    assert HARNESS.aliases(x, tf.identity(x))  # the check can see sharing...
    assert not HARNESS.aliases(x, y)  # ...and to_device has none
    np.testing.assert_array_equal(y.numpy(), np.arange(6.0))


def test_copy_if_needed_returns_the_tensor_itself():
    x = tf.constant([1.0])
    assert ds.copy_if_needed(x, ds.cpu()) is x
    assert ds.copy_if_needed(x, "/CPU:0") is x


def test_to_device_works_inside_tf_function():
    @tf.function
    def doubled(x):
        return ds.to_device(x, ds.cpu()) * 2.0

    np.testing.assert_array_equal(doubled(tf.constant([1.0, 2.0])).numpy(), [2.0, 4.0])


def test_to_device_of_a_variable_returns_a_tensor_holding_its_value():
    v = tf.Variable([1.0, 2.0])
    t = ds.to_device(v, ds.cpu())
    assert isinstance(t, tf.Tensor) and not isinstance(t, tf.Variable)
    assert ds.neutral_device(v) == "cpu" and ds.neutral_device(t) == "cpu"
    v.assign([5.0, 6.0])
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])


def test_copy_if_needed_keeps_a_variable_that_is_already_there():
    v = tf.Variable([1.0])
    assert ds.copy_if_needed(v, ds.cpu()) is v


@pytest.mark.parametrize("fn", [ds.to_device, ds.copy_if_needed])
def test_gradients_reach_a_variable_through_copies(fn):
    v = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(fn(v, ds.try_gpu()) * 3.0)
    np.testing.assert_array_equal(tape.gradient(total, v).numpy(), [3.0, 3.0])


def test_to_numpy_of_a_scalar_is_an_owned_array():
    host = ds.to_numpy(tf.constant(2.5))
    assert isinstance(host, np.ndarray) and host.shape == () and host.flags.owndata
    assert host == 2.5


def test_to_numpy_keeps_bfloat16():
    host = ds.to_numpy(tf.constant([1.5, -2.0], dtype=tf.bfloat16))
    assert host.dtype.name == "bfloat16"
    np.testing.assert_array_equal(host.astype(np.float32), [1.5, -2.0])


# ------------------------------------------------------------ composite tensors and Keras variables


def test_ragged_tensors_move_whole_and_keep_their_type():
    rt = tf.ragged.constant([[1.0, 2.0], [3.0]])
    out = ds.to_device(rt, ds.cpu())
    assert isinstance(out, tf.RaggedTensor) and out is not rt
    assert out.to_list() == [[1.0, 2.0], [3.0]]
    assert not HARNESS.aliases(rt.flat_values, out.flat_values)
    assert ds.neutral_device(rt) == "cpu" and ds.copy_if_needed(rt, "cpu") is rt
    with pytest.raises(ds.UnsupportedValueError, match="to_tensor"):
        ds.to_numpy(rt)


def test_sparse_tensors_and_indexed_slices_move_whole():
    st = tf.sparse.SparseTensor([[0, 1]], [5.0], [2, 2])
    out = ds.to_device({"sparse": st}, ds.cpu())["sparse"]
    assert isinstance(out, tf.SparseTensor)
    np.testing.assert_array_equal(tf.sparse.to_dense(out).numpy(), [[0.0, 5.0], [0.0, 0.0]])
    assert not HARNESS.aliases(st.values, out.values)
    slices = tf.IndexedSlices(tf.constant([[1.0]]), tf.constant([0]), tf.constant([2, 1]))
    moved = ds.to_device([slices], ds.cpu())[0]
    assert isinstance(moved, tf.IndexedSlices)
    np.testing.assert_array_equal(tf.convert_to_tensor(moved).numpy(), [[1.0], [0.0]])
    with pytest.raises(ds.UnsupportedValueError, match="sparse.to_dense"):
        ds.to_numpy(st)


def test_a_tensor_array_in_a_nest_is_refused_not_skipped():
    ta = tf.TensorArray(tf.float32, size=2)
    with pytest.raises(ds.UnsupportedValueError, match="TensorArray.*stack"):
        ds.to_device({"steps": ta}, ds.cpu())


def test_keras_variables_move_through_their_value():
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "tensorflow":
        pytest.skip("Keras here runs on another backend")
    kv = keras.Variable([1.0, 2.0])
    assert ds.neutral_device(kv) == "cpu"
    assert ds.copy_if_needed(kv, ds.cpu()) is kv
    copied = ds.to_device({"w": kv}, ds.cpu())["w"]
    assert isinstance(copied, tf.Tensor)
    np.testing.assert_array_equal(copied.numpy(), [1.0, 2.0])
    kv.assign([7.0, 8.0])
    np.testing.assert_array_equal(copied.numpy(), [1.0, 2.0])  # a copy, not an alias
    np.testing.assert_array_equal(ds.to_numpy(kv), [7.0, 8.0])


def test_copies_work_under_the_explicit_device_policy():
    """docs/tensorflow.md recommends the "explicit" policy; devshim's own copies must pass it."""
    result = run_python("""
        import tensorflow as tf
        import devshim as ds
        with ds.gpu(0):
            a = tf.constant([1.0, 2.0])
            v = tf.Variable([3.0])
        tf.config.experimental.set_device_policy("explicit")
        out = [ds.to_device(a, ds.gpu(1)), ds.to_device(a, ds.gpu(0)), ds.to_device(a, ds.cpu()),
               ds.copy_if_needed(a, ds.gpu(1)), ds.to_device(v, ds.gpu(1)),
               ds.to_device({"a": a}, ds.gpu(1))["a"]]
        print(*(str(ds.neutral_device(t)) for t in out))
        try:
            with ds.gpu(1):
                a + out[0]
        except tf.errors.InvalidArgumentError:
            print("explicit policy still refuses implicit copies")
    """, DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["gpu:1", "gpu:0", "cpu:0", "gpu:1", "gpu:1", "gpu:1"]
    assert lines[1] == "explicit policy still refuses implicit copies"


def test_a_real_gpu_name_is_not_a_virtual_gpu():
    result = run_python("""
        import tensorflow as tf
        import devshim as ds
        from devshim.backends.tensorflow.core import TFDevice
        assert ds.num_gpus() == 2
        x = tf.ones(1)
        for target in (TFDevice("/GPU:0"), TFDevice("/GPU:1")):
            try:
                ds.to_device(x, target)
            except ds.DeviceUnavailableError as err:
                print("refused:", "real GPU" in str(err))
        print(ds.neutral_device(ds.to_device(x, "/GPU:1")))   # a spec string: the backend's gpu:1
        print(ds.neutral_device(ds.to_device(x, TFDevice("/CPU:2"))))  # the logical device itself
    """, DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["refused:", "True", "refused:", "True", "gpu:1", "gpu:1"]


# ------------------------------------------------------------ synchronize and info


def test_synchronize_waits_through_tensorflow(bk, monkeypatch):
    calls = []
    monkeypatch.setattr(tf.test.experimental, "sync_devices", lambda: calls.append(1))
    bk.synchronize(None)
    bk.synchronize(ds.cpu())
    assert calls == [1, 1]



def test_device_details_list_cpu_then_each_gpu(bk):
    details = bk.device_details()
    assert [d["device"] for d in details] == ["cpu:0"] + [f"gpu:{i}" for i in range(ds.num_gpus())]
    assert all(d["name"] for d in details)


# ------------------------------------------------------------ virtual devices


def test_virtual_devices_asked_for_after_tensorflow_initialised_raise():
    result = run_python("""
        import tensorflow as tf
        import devshim as ds
        tf.ones(1)  # TensorFlow initialises its devices here
        ds.testing.virtual_devices(2)
        try:
            ds.num_gpus()
        except ds.BackendError as err:
            print("RAISED:", err)
    """)
    assert result.returncode == 0, result.stderr
    assert "RAISED:" in result.stdout and "too late" in result.stdout
    assert "DEVSHIM_VIRTUAL_DEVICES=2 before starting Python" in result.stdout


def test_virtual_devices_cannot_change_count_once_initialised():
    result = run_python("""
        import tensorflow as tf
        import devshim as ds
        assert ds.num_gpus() == 2
        with ds.try_gpu(1):
            tf.ones(1)
        assert ds.num_gpus() == 2  # asking again for the same count is fine
        ds.testing.virtual_devices(3)
        try:
            ds.try_gpu(2)
        except ds.BackendError as err:
            print("RAISED:", err)
    """, DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    assert "RAISED: ds.testing.virtual_devices(3) asked for 3 virtual GPUs" in result.stdout
    assert "TensorFlow started its devices with 2, and the number cannot change" in result.stdout


def test_virtual_devices_set_in_time_but_asked_for_after_a_strategy_say_ask_devshim_first():
    """DEVSHIM_VIRTUAL_DEVICES was set before Python started; a tf.distribute strategy created
    before devshim was asked for devices started TensorFlow's runtime first."""
    result = run_python("""
        import tensorflow as tf
        import devshim as ds
        tf.distribute.MirroredStrategy()
        try:
            ds.num_gpus()
        except ds.BackendError as err:
            print("RAISED:", err)
    """, DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    assert "RAISED: DEVSHIM_VIRTUAL_DEVICES=2 asks for 2 virtual GPUs" in result.stdout
    assert "Ask devshim first: call ds.num_gpus()" in result.stdout and "strategy" in result.stdout
    assert "before starting Python" not in result.stdout  # it was: that is not the remedy


def test_entering_a_device_scope_applies_the_request_first():
    """``with ds.cpu():`` may be the first thing to touch TensorFlow; it must not lose the request."""
    result = run_python("""
        import tensorflow as tf
        import devshim as ds
        ds.testing.virtual_devices(2)
        with ds.cpu():
            a = tf.ones(1)
        with ds.try_gpu(1):
            b = tf.ones(1)
        print(ds.neutral_device(a), repr(ds.neutral_device(b)), b.device)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "cpu:0", "Device('gpu:1',", "backend='tensorflow',", "virtual=True)",
        "/job:localhost/replica:0/task:0/device:CPU:2",
    ]


def test_nested_scopes_on_virtual_devices_place_each_tensor_where_asked():
    result = run_python("""
        import tensorflow as tf
        import devshim as ds
        g0, g1 = ds.try_all_gpus()
        with g0:
            a = tf.ones(1)
            with g1:
                b = tf.ones(1)
                with g0:
                    c = tf.ones(1)
                d = tf.ones(1)
            e = tf.ones(1)
        f = tf.ones(1)
        print(*(str(ds.neutral_device(t)) for t in (a, b, c, d, e, f)))
    """, DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["gpu:0", "gpu:1", "gpu:0", "gpu:1", "gpu:0", "cpu:0"]


# ------------------------------------------------------------ real GPUs


@needs_gpu
def test_copies_to_and_on_a_real_gpu():
    x = tf.constant([True, False, True])  # bool: no DeepCopy kernel on GPU
    on_gpu = ds.to_device(x, ds.gpu(0))
    again = ds.to_device(on_gpu, ds.gpu(0))
    for y in (on_gpu, again):
        d = ds.neutral_device(y)
        assert (str(d), d.virtual) == ("gpu:0", False)
        np.testing.assert_array_equal(y.numpy(), [True, False, True])
    assert again is not on_gpu and ds.copy_if_needed(on_gpu, "gpu:0") is on_gpu


def test_the_guard_lets_int32_shapes_and_tensorflows_own_gradient_code_through():
    # int32 tensors live in host memory wherever they are placed: reading one, or handing one
    # made under one GPU to an op on another, moves nothing. The guard comes from the variable,
    # so it is installed before the virtual GPUs exist (its default device must follow them).
    code = (
        "import tensorflow as tf, devshim as ds\n"
        "g0, g1 = ds.try_all_gpus()\n"
        "with g0:\n    shape = tf.constant([2, 2])\n    x = tf.ones(4)\n    w = tf.Variable(tf.ones(3))\n"
        "with g1:\n    y = tf.reshape(ds.to_device(x, g1), shape)\n"
        "print(shape.numpy().tolist(), ds.neutral_device(y))\n"
        "tf.random.uniform((2,))  # no scope: int32 host inputs, on the default device\n"
        "with tf.GradientTape() as tape:\n    with g0:\n        loss = tf.reduce_sum(w * w)\n"
        "with g0:\n    print(ds.neutral_device(tape.gradient(loss, w)))\n"
        "with g0:\n    total = tf.reduce_sum(x)\n"
        "try:\n    float(total)\nexcept ds.ImplicitTransferError:\n    print('float read refused')\n"
    )
    result = run_fresh(code, DEVSHIM_BACKEND="tensorflow", DEVSHIM_VIRTUAL_DEVICES="2",
                       DEVSHIM_TRANSFER_GUARD="disallow")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:3] == ["[2, 2] gpu:1", "gpu:0", "float read refused"]


# ------------------------------------------------------------ Keras models as Keras users write them


@pytest.fixture
def keras():
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "tensorflow":
        pytest.skip("Keras here runs on another backend")
    return keras


def target_and_name():
    """The accelerator (a virtual one in the virtual pass), else the CPU, and its devshim name."""
    target = ds.try_gpu()
    return target, ("gpu:0" if ds.num_gpus() else "cpu:0")


def weight_places(model) -> set:
    return {ds.neutral_device(w.value) for w in model.weights}


def functional(keras):
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(3)(hidden))


def test_a_functional_model_is_placed_and_replicated(keras):
    model = functional(keras)  # keras.Model(inputs, outputs): a Functional in Keras 3
    assert type(model).__name__ == "Functional"
    x = np.random.default_rng(0).standard_normal((5, 4)).astype("float32")
    expected = model(x).numpy()
    target, name = target_and_name()
    placed = ds.place_model(model, target)
    assert str(ds.neutral_device(ds.model_device(placed))) == name and weight_places(placed) == {name}
    assert (placed is model) == (name == "cpu:0")  # already there: the model itself; else a clone
    replicas = ds.replicate(model, [ds.cpu(), target])
    assert [str(ds.neutral_device(ds.model_device(r))) for r in replicas] == ["cpu:0", name]
    assert all(r is not model and type(r) is type(model) for r in replicas)
    for replica in replicas:
        with ds.model_device(replica):  # TensorFlow's own device, a scope
            np.testing.assert_allclose(replica(x).numpy(), expected, rtol=1e-6)


def test_a_subclassed_model_is_refused_and_the_advice_works(keras):
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(2)

        def call(self, x):
            return self.dense(x)

    x = np.ones((2, 3), "float32")
    built = Net()
    built(x)
    elsewhere = ds.gpu(0) if ds.num_gpus() else None
    attempts = [lambda: ds.replicate(built, [ds.cpu(), ds.cpu()])]
    if elsewhere is not None:
        attempts.append(lambda: ds.place_model(built, elsewhere))
    for attempt in attempts:
        with pytest.raises(ds.UnsupportedPlacementError) as info:
            attempt()
        message = str(info.value)
        assert "subclassed" in message and "Net" in message
        assert "ds.place_model(model, device)" in message  # the advice: place it before its first call
    target, name = target_and_name()
    fresh = ds.place_model(Net(), target)  # what the error advises
    fresh(x)
    assert str(ds.neutral_device(ds.model_device(fresh))) == name and weight_places(fresh) == {name}


def test_an_unbuilt_sequential_is_placed_for_its_first_call(keras):
    # D2L's TensorFlow code: no input shape, built by the first call.
    net = keras.Sequential([keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
    with pytest.raises(ds.UnbuiltModelError, match=r"ds\.place_model\(model, device\)"):
        ds.model_device(net)
    target, name = target_and_name()
    assert ds.place_model(net, target) is net and not net.built
    assert str(ds.neutral_device(ds.model_device(net))) == name  # the recorded device, before any weight exists
    with pytest.raises(ds.UnbuiltModelError):
        ds.replicate(net, [ds.cpu()])  # nothing to copy yet
    y = net(tf.ones((2, 3)))  # the first call, under no device scope: builds on the target
    assert tuple(y.shape) == (2, 1) and net.built and len(net.weights) == 4
    assert weight_places(net) == {name} and str(ds.neutral_device(ds.model_device(net))) == name
    assert "_maybe_build" not in vars(net)  # devshim's first-call hooks are gone
    replicas = ds.replicate(net, [ds.cpu()])
    np.testing.assert_allclose(replicas[0](tf.ones((2, 3))).numpy(), y.numpy(), rtol=1e-6)


def test_placing_an_unbuilt_model_again_moves_its_first_call(keras):
    target, name = target_and_name()
    net = keras.Sequential([keras.layers.Dense(2)])
    ds.place_model(net, target)
    ds.place_model(net, ds.cpu())  # the last placement wins
    assert str(ds.neutral_device(ds.model_device(net))) == "cpu:0"
    net(tf.ones((1, 3)))
    assert weight_places(net) == {"cpu:0"}
    shaped = ds.place_model(keras.Sequential([keras.layers.Dense(2)]), target, input_shape=(None, 3))
    assert shaped.built and weight_places(shaped) == {name}  # with a shape: built at once


# ------------------------------------------------------------ Keras 2


class _Keras2Layer:
    """A layer of a stand-in Keras 2 package (tf_keras 2.16.0), for the refusal on any release."""


def test_a_keras_2_model_is_refused_by_name_saying_what_release_it_needs(monkeypatch):
    fake = types.ModuleType("tf_keras")
    fake.__version__ = "2.16.0"
    fake.layers = types.SimpleNamespace(Layer=_Keras2Layer)
    monkeypatch.setitem(__import__("sys").modules, "tf_keras", fake)
    for call in (lambda: ds.place_model(_Keras2Layer(), ds.cpu()), lambda: ds.replicate(_Keras2Layer(), [ds.cpu()]),
                 lambda: ds.model_device(_Keras2Layer())):
        with pytest.raises(ds.FrameworkReleaseError, match=r"Keras 2 model \(tf_keras 2\.16\.0\); devshim places "
                                                           r"Keras 3 models \(keras 3\.0 or later"):
            call()


def test_a_real_tf_keras_model_is_refused_and_its_tensors_still_move():
    tf_keras = pytest.importorskip("tf_keras", reason="tf_keras (Keras 2) is installed in the tensorflow-floor env")
    model = tf_keras.Sequential([tf_keras.layers.Dense(2)])
    model.build((None, 3))
    with pytest.raises(ds.FrameworkReleaseError, match="TF_USE_LEGACY_KERAS"):
        ds.place_model(model, ds.cpu())
    moved = ds.to_device(model.weights[0], ds.cpu())  # a Keras 2 weight is a tf.Variable
    assert ds.device_of(moved) == ds.cpu() and tuple(moved.shape) == (3, 2)

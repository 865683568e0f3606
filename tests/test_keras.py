"""Keras 3 on the framework it runs on (`KERAS_BACKEND`: torch, JAX or TensorFlow), plain and on
virtual GPUs: devshim follows Keras's backend, its devices work in `keras.device`, a placed model
trains and infers on its device with its optimiser's state there, and the transfer guard sees the
copies Keras makes. tox's interop env runs this file once per KERAS_BACKEND, plain and with two
virtual GPUs; the tensorflow env runs it with Keras on TensorFlow.

Expectations come from the machine: "GPU 1" is `ds.try_gpu(1)`, the CPU on a machine without one.
"""

from __future__ import annotations

import numpy as np
import pytest

import devshim as ds
from devshim import backends, settings
from devshim.backends import selection
from devshim.backends.spec import BackendSpec
from helpers import run_python

keras = pytest.importorskip("keras")
BACKEND = keras.backend.backend()
if BACKEND not in backends.specs() or not backends.specs()[BACKEND].is_installed():
    pytest.skip(f"Keras runs on {BACKEND}, which is no devshim backend here", allow_module_level=True)
ds.num_gpus(backend=BACKEND)  # virtual GPUs, if asked for, exist before Keras makes its first variable

X = np.random.default_rng(0).standard_normal((8, 4)).astype("float32")
Y = np.random.default_rng(1).standard_normal((8, 2)).astype("float32")


@pytest.fixture
def keras_selected(setenv):
    """devshim's selection as DEVSHIM_BACKEND leaves it to Keras (unset), started afresh, in a process
    whose KERAS_BACKEND chose the framework Keras runs on."""
    setenv(settings.BACKEND_VAR, None)
    setenv("KERAS_BACKEND", BACKEND)
    backends.reset_backend()
    yield
    backends.reset_backend()


def where(value) -> str:
    return str(ds.neutral_device(value))


def mlp():
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])


def test_devshim_follows_the_framework_keras_runs_on(keras_selected):
    assert ds.get_backend().name == BACKEND
    assert backends.selection_reason() == f"keras: Keras runs on {BACKEND}"


def test_without_keras_backend_set_a_first_installed_framework_in_use_keeps_its_place(keras_selected, setenv,
                                                                                     monkeypatch):
    """Importing TensorFlow imports Keras: that alone must not take devshim from the framework in use."""
    first = ds.available_backends()[0]
    if first == BACKEND:
        pytest.skip(f"Keras runs on {first}, the first installed framework")
    setenv("KERAS_BACKEND", None)
    loaded = BackendSpec.is_loaded
    monkeypatch.setattr(BackendSpec, "is_loaded", lambda spec: spec.name == first or loaded(spec))  # as if imported
    monkeypatch.setattr(selection, "instance", lambda name: f"<{name}>")  # (made without importing it)
    adapter, reason = selection.select_default()
    assert adapter == f"<{first}>" and reason.startswith(f"auto: {first} is the first installed")


def test_a_devshim_backend_other_than_keras_s_is_a_named_error(keras_selected, setenv):
    other = next(name for name in ds.available_backends() if name != BACKEND)
    setenv(settings.BACKEND_VAR, other)
    backends.reset_backend()
    with pytest.raises(ds.KerasBackendMismatchError, match=rf"DEVSHIM_BACKEND={other}, but Keras runs on "
                                                          rf"{BACKEND}.*Set DEVSHIM_BACKEND={BACKEND}") as info:
        ds.try_gpu()
    assert isinstance(info.value, ds.BackendError)
    setenv(settings.BACKEND_VAR, BACKEND)  # what the message says to do
    assert ds.get_backend().name == BACKEND


def test_a_placed_mlp_trains_on_gpu_1_with_every_variable_and_output_there(keras_selected):
    gpu1 = ds.try_gpu(1)
    model = ds.place_model(mlp(), gpu1)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")  # an optimiser made before: moved there
    model.fit(X, Y, batch_size=4, epochs=1, verbose=0)  # two steps
    assert int(ds.to_numpy(model.optimizer.iterations)) == 2
    name = where(gpu1)
    assert {where(w.value) for w in model.weights} == {name}
    assert {where(v.value) for v in model.optimizer.variables} == {name} and len(model.optimizer.variables) > 2
    assert where(model(ds.to_device(X, gpu1))) == where(model(X)) == name  # a NumPy batch: Keras copies it there
    assert ds.model_device(model) == gpu1


def test_keras_device_builds_a_model_on_devshim_s_device(keras_selected):
    gpu1 = ds.try_gpu(1)
    with keras.device(gpu1):
        model = mlp()
        out = model(ds.to_device(X, gpu1))
        assert ds.model_device(model) == gpu1
    assert {where(w.value) for w in model.weights} == {where(out)} == {where(gpu1)}


def test_an_unbuilt_subclassed_model_placed_is_built_there_by_its_first_call(keras_selected):
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(2)

        def call(self, x):
            return self.dense(x)

    gpu1 = ds.try_gpu(1)
    net = ds.place_model(Net(), gpu1)
    assert ds.model_device(net) == gpu1  # the recorded device, before any weight exists
    out = net(X)  # a NumPy batch, under no device scope
    assert {where(w.value) for w in net.weights} == {where(out)} == {where(gpu1)}
    ds.unplace(net)
    assert "call" not in vars(net)  # its calls follow Keras's current device again


def test_the_guard_refuses_a_batch_on_another_device_and_passes_one_on_the_model_s(keras_selected):
    gpu1 = ds.try_gpu(1)
    model = ds.place_model(mlp(), gpu1)
    here = ds.to_device(X, gpu1)
    with ds.transfer_guard("disallow") as report:
        out = model(here)
    assert report.total == 0 and where(out) == where(gpu1)
    elsewhere = next((d for d in ds.devices() if d != gpu1), None)
    if elsewhere is None:
        pytest.skip("this machine has one device: no batch can be elsewhere")
    there = ds.to_device(X, elsewhere)
    with pytest.raises(ds.DeviceMismatchError):
        with ds.transfer_guard("disallow"):
            model(there)


def test_a_keras_variable_moves_through_its_value(keras_selected):
    v = keras.Variable(np.arange(3, dtype="float32"))
    assert ds.device_of(v) == ds.device_of(v.value) and ds.copy_if_needed(v, ds.device_of(v)) is v
    copy = ds.to_device(v, ds.cpu())
    assert ds.backends.backend_for_tensor(copy).name == BACKEND and where(copy) == "cpu:0"
    np.testing.assert_array_equal(ds.to_numpy(v), [0, 1, 2])


def test_replicas_are_placed_each_on_its_device(keras_selected):
    model = mlp()
    devices = [ds.cpu(), ds.try_gpu(1)]
    replicas = ds.replicate(model, devices)
    expected = ds.to_numpy(model(X))
    for replica, device in zip(replicas, devices):
        assert replica is not model and ds.model_device(replica) == device
        np.testing.assert_allclose(ds.to_numpy(replica(ds.to_device(X, device))), expected, rtol=1e-5)


@pytest.mark.skipif(BACKEND != "torch" or not settings.virtual_device_count(),
                    reason="KERAS_TORCH_DEVICE naming a virtual GPU: Keras on torch, with virtual GPUs")
def test_keras_torch_device_naming_a_virtual_gpu_is_devshim_s():
    result = run_python("""
        import numpy as np, keras, devshim as ds
        ds.settings.set_virtual_devices(0)
        try:
            ds.try_gpu()
        except ds.DeviceUnavailableError as error:
            print("refused:", "DEVSHIM_VIRTUAL_DEVICES=2" in str(error))
        ds.settings.set_virtual_devices(2)
        ds.try_gpu()  # devshim meets Keras again: the virtual GPUs are registered before Keras's first variable
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        out = model(np.ones((1, 3), "float32"))
        print(ds.neutral_device(ds.model_device(model)), ds.neutral_device(out))
    """, KERAS_BACKEND="torch", KERAS_TORCH_DEVICE="vgpu:1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["refused:", "True", "gpu:1", "gpu:1"]


@pytest.mark.skipif(BACKEND == "tensorflow", reason="TensorFlow runs an unscoped op on its default device "
                    "(docs/tensorflow.md): ds.model_device of a model devshim did not place is where its weights are")
def test_an_unplaced_model_is_where_keras_computes_it(keras_selected):
    devices = ds.devices()
    current = ds.device_of(keras.ops.ones(1))  # Keras's current device: its default here
    elsewhere = next((d for d in devices if d != current), None)
    if elsewhere is None:
        pytest.skip("this machine has one device: Keras computes where the weights are")
    with keras.device(elsewhere):
        model = mlp()
        assert ds.model_device(model) == elsewhere
    with pytest.raises(ds.DeviceMismatchError, match="Keras's current device"):
        ds.model_device(model)  # its weights are elsewhere than where Keras would compute its calls
    assert ds.model_device(ds.place_model(model, elsewhere)) == elsewhere


def test_a_copy_keras_makes_is_reported_at_the_user_s_line_not_inside_keras(keras_selected):
    gpu1 = ds.try_gpu(1)
    elsewhere = next((d for d in ds.devices() if d != gpu1), None)
    if elsewhere is None:
        pytest.skip("this machine has one device: no batch can be elsewhere")
    model = ds.place_model(mlp(), gpu1)
    there = ds.to_device(X, elsewhere)
    with ds.transfer_guard("log") as report:
        try:
            model(there)
        except ValueError as refused:  # JAX's own refusal of a computation on two devices (a ValueError)
            assert "incompatible devices" in str(refused) or isinstance(refused, ds.DeviceMismatchError), refused
            pytest.skip("this framework refuses a batch on another device itself (JAX): Keras copies nothing")
    assert report.total >= 1
    assert all(event.site.startswith(__file__ + ":") for event in report.events), report.sites

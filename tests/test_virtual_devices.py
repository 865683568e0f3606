"""Virtual devices: DEVSHIM_VIRTUAL_DEVICES=N and ds.testing.virtual_devices(N).

TensorFlow fixes its devices when it initialises, so the TensorFlow checks run in a fresh
interpreter with the variable set; they run in the plain test pass as well as the virtual one.
PyTorch's virtual GPUs have their own file, tests/test_torch_virtual.py.
"""

from __future__ import annotations

import json
import os

import pytest

import devshim as ds
from devshim import settings
from devshim.backends import virtual, virtual_capable_backends
from devshim.backends.torch.core import TorchBackend
from helpers import run_python


@pytest.fixture
def requested(setenv):
    """Ask for virtual devices in this process for one test (conftest restores the environment's choice)."""
    setenv(settings.DEVICE_VAR, None)  # DEVSHIM_DEVICE=cpu would hide them
    return ds.testing.virtual_devices


def test_the_one_virtual_device_rule():
    """Every backend with virtual devices maps them the same way: gpu:i is host device i + 1."""
    assert [virtual.host_index(i) for i in range(3)] == [1, 2, 3]
    assert [virtual.virtual_gpu_index(h, count=2) for h in range(4)] == [None, 0, 1, None]
    assert virtual.host_devices_needed(2) == 3


# ------------------------------------------------------------ the D2L flow on TensorFlow


def test_the_d2l_tensorflow_flow_on_two_virtual_gpus():
    pytest.importorskip("tensorflow")
    result = run_python("""
        import numpy as np
        import tensorflow as tf
        import devshim as ds

        assert ds.num_gpus() == 2 and len(ds.try_all_gpus()) == 2
        with ds.try_gpu():
            X = tf.ones((2, 3))
        with ds.try_gpu(1):
            Y = tf.random.uniform((2, 3))
        Z = ds.to_device(X, ds.try_gpu(1))

        assert str(ds.neutral_device(X)) == "gpu:0" and ds.neutral_device(X).virtual
        assert str(ds.neutral_device(Y)) == str(ds.neutral_device(Z)) == "gpu:1"
        assert repr(ds.neutral_device(Z)) == "Device('gpu:1', backend='tensorflow', virtual=True)"
        # the native device (a "/CPU:2" name) still compares as virtual gpu:1, both ways
        assert ds.neutral_device(Z) == ds.try_gpu(1) and ds.try_gpu(1) == ds.neutral_device(Z)
        assert ds.neutral_device(Z) != ds.cpu() and ds.neutral_device(Z) != "cpu:2"
        with tf.device(ds.try_gpu(1)):   # TensorFlow takes the device as a name, too
            W = tf.ones((2, 3))
        assert ds.same_device(W, Z)
        assert ds.same_device(Y, Z) and not ds.same_device(X, Y) and not ds.same_device(X, Z)
        # real copies: TensorFlow's own placement, and separate host buffers
        assert X.device.endswith("/device:CPU:1") and Z.device.endswith("/device:CPU:2")
        def host(t):  # the buffer itself (EagerTensor has __dlpack__ only from TensorFlow 2.17 on)
            capsule = tf.experimental.dlpack.to_dlpack(t)
            exporter = type("Exporter", (), {"__dlpack__": lambda self, stream=None, **_: capsule,
                                             "__dlpack_device__": lambda self: (1, 0)})
            return np.from_dlpack(exporter())

        assert not np.shares_memory(host(X), host(Z)) and np.shares_memory(host(X), host(X))

        # TensorFlow runs an op without a scope on its default device, copying inputs there
        # silently; the "explicit" policy makes it refuse instead, as a real GPU pair would.
        tf.config.experimental.set_device_policy("explicit")
        with ds.try_gpu(1):
            S = Y + Z
            try:
                X + Y
            except tf.errors.InvalidArgumentError:
                pass
            else:
                raise AssertionError("X + Y across virtual GPUs ran under the explicit policy")
        assert str(ds.neutral_device(S)) == "gpu:1"
        np.testing.assert_allclose(S.numpy(), Y.numpy() + 1.0)
        assert ds.copy_if_needed(Z, ds.try_gpu(1)) is Z
        try:
            ds.ensure_same_device(X, Y)
        except ds.DeviceMismatchError as err:
            assert "gpu:0" in str(err) and "gpu:1" in str(err)
        else:
            raise AssertionError("X and Y are on different virtual GPUs")

        # the host is still the CPU, and new tensors go there by default
        assert str(ds.neutral_device(tf.ones(1))) == "cpu:0" and ds.cpu() != ds.try_gpu()
        print("D2L OK")
    """, DEVSHIM_BACKEND="tensorflow", DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    assert "D2L OK" in result.stdout


def test_gradients_cross_virtual_gpus():
    pytest.importorskip("tensorflow")
    result = run_python("""
        import tensorflow as tf
        import devshim as ds

        with ds.gpu(0):
            w = tf.Variable([1.0, 2.0])
        with tf.GradientTape() as tape:
            on_1 = ds.to_device(w, ds.gpu(1))
            back = ds.copy_if_needed(on_1 * 3.0, ds.gpu(0))
            total = tf.reduce_sum(back)
        grad = tape.gradient(total, w)
        print(ds.neutral_device(on_1), ds.neutral_device(back), grad.numpy().tolist())
    """, DEVSHIM_BACKEND="tensorflow", DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["gpu:1", "gpu:0", "[3.0,", "3.0]"]


def test_devshim_info_lists_the_virtual_gpus():
    pytest.importorskip("tensorflow")
    result = run_python(
        "", "-m", "devshim", "info", "--json",
        DEVSHIM_BACKEND="tensorflow", DEVSHIM_VIRTUAL_DEVICES="2",
    )
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    tf_info = next(fw for fw in info["frameworks"] if fw["name"] == "tensorflow")
    assert tf_info["status"] == "ok"
    assert [(d["device"], bool(d.get("virtual"))) for d in tf_info["devices"]] == [
        ("cpu:0", False), ("gpu:0", True), ("gpu:1", True),
    ]


def test_in_this_process_when_the_variable_is_set():
    """The virtual tox pass: the suite itself runs on the virtual GPUs."""
    count = settings.virtual_device_count() if os.environ.get(settings.VIRTUAL_DEVICES_VAR) else 0
    if not count:
        pytest.skip(f"{settings.VIRTUAL_DEVICES_VAR} is not set in this test run")
    tf = pytest.importorskip("tensorflow")
    from harnesses.tensorflow_harness import HARNESS  # noqa: F401  (configures TensorFlow)

    with ds.use_backend("tensorflow"):
        assert ds.num_gpus() == count
        with ds.try_gpu(count - 1):
            x = tf.ones(1)
        d = ds.neutral_device(x)
        assert (str(d), d.virtual) == (f"gpu:{count - 1}", True)


# ------------------------------------------------------------ backends that cannot


def test_backends_without_virtual_devices_refuse_naming_those_that_can(requested):
    adapter = ds.backends.load_backend("numpy")
    requested(2)
    with pytest.raises(ds.BackendError) as info:
        adapter.num_gpus()
    message = str(info.value)
    assert f"The {adapter.name} backend cannot present virtual devices" in message
    assert "DEVSHIM_VIRTUAL_DEVICES=2" in message
    capable = virtual_capable_backends()
    assert adapter.name not in capable
    assert f"Backends that can: {', '.join(capable) or 'none installed'}." in message


def test_numpy_refuses_rather_than_falling_back_to_the_cpu(requested):
    requested(2)
    for ask in (ds.num_gpus, ds.try_gpu, ds.try_all_gpus, ds.devices):
        with pytest.raises(ds.BackendError, match="cannot present virtual devices"):
            ask(backend="numpy")


def test_torch_is_among_the_backends_that_can():
    pytest.importorskip("torch")
    assert "torch" in virtual_capable_backends()
    assert TorchBackend.spec.virtual_devices


def test_zero_turns_the_request_off(requested):
    requested(0)
    assert ds.num_gpus(backend="numpy") == 0


# ------------------------------------------------------------ bad requests


@pytest.mark.parametrize("value", ["-1", "two", "1.5", "2 gpus"])
@pytest.mark.parametrize("backend", ["numpy", "tensorflow", "torch"])
def test_bad_variable_values_say_what_is_expected(setenv, value, backend):
    if backend not in ds.available_backends():
        pytest.skip(f"{backend} is not installed in this environment")
    setenv(settings.VIRTUAL_DEVICES_VAR, value)
    with pytest.raises(ds.BackendError, match="must be a non-negative whole number, e.g. DEVSHIM_VIRTUAL_DEVICES=2"):
        ds.num_gpus(backend=backend)


@pytest.mark.parametrize("value", ["", " ", "0"])
def test_empty_or_zero_variable_means_no_virtual_devices(setenv, value):
    setenv(settings.VIRTUAL_DEVICES_VAR, value)
    assert ds.num_gpus(backend="numpy") == 0


@pytest.mark.parametrize("value", [-1, 1.5, "2", True, None])
def test_virtual_devices_takes_a_non_negative_int(value, requested):
    with pytest.raises(ds.BackendError, match="non-negative int"):
        requested(value)

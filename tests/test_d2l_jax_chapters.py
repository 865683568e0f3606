"""The D2L "GPUs" chapter (JAX tab) and a linear-regression training loop after it, on virtual
GPUs, under ds.transfer_guard("disallow"), as they run on a machine with two GPUs: JAX's default
device is GPU 0 (virtual gpu:0 here), data goes to a device explicitly, and nothing moves
between devices behind the code's back.

They run in the pass with DEVSHIM_VIRTUAL_DEVICES set (tox's second jax pass): the chapter asks
for two GPUs, so the virtual ones must exist before JAX starts.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import devshim as ds
from devshim import settings

jax = pytest.importorskip("jax")
# Importing the harness applies DEVSHIM_VIRTUAL_DEVICES before any array below exists.
from harnesses.jax_harness import HARNESS  # noqa: E402,F401
import jax.numpy as jnp  # noqa: E402

pytestmark = pytest.mark.skipif(
    int(os.environ.get(settings.VIRTUAL_DEVICES_VAR, "0") or 0) < 2,
    reason=f"needs {settings.VIRTUAL_DEVICES_VAR}=2 or more (tox's second jax pass sets it)")


@pytest.fixture
def gpus(setenv):
    setenv("DEVSHIM_DEVICE", None)
    with ds.use_backend("jax"):
        devices = ds.try_all_gpus()
        assert [ds.neutral_device(jax.device_put(jnp.zeros(()), d)).virtual for d in devices[:2]] == [True, True]
        yield devices[:2]


def only_device(x):
    (device,) = x.devices()
    return device


def test_a_new_array_lands_on_gpu_0_as_on_a_gpu_machine(gpus):
    x = jnp.array([1, 2, 3])  # the chapter's x.device(): GPU 0 on a GPU machine
    assert only_device(x) is gpus[0] and str(ds.neutral_device(x)) == "gpu:0"
    assert only_device(jax.random.uniform(jax.random.PRNGKey(0), (2,))) is gpus[0]
    with jax.default_device(ds.cpu()):  # JAX's own way to pick another default still works
        assert only_device(jnp.ones(1)) is ds.cpu()


def test_the_gpus_chapter_under_disallow(gpus):
    X = jax.device_put(jnp.ones((2, 3)), ds.try_gpu())
    Y = jax.device_put(jax.random.uniform(jax.random.PRNGKey(0), (2, 3)), ds.try_gpu(1))
    with pytest.raises(ds.DeviceMismatchError, match="Received incompatible devices"):
        with ds.transfer_guard("disallow"):
            X + Y  # committed to two GPUs: JAX refuses, and the block says so in devshim's terms
    # Made outside the block: making an array on a GPU sends its fill value there, which JAX
    # (and so devshim's "disallow") counts as host data going to a device.
    params = ds.place_model({"w": jnp.full((3, 1), 0.5), "b": jnp.zeros((1,))}, ds.try_gpu())
    with ds.transfer_guard("disallow") as report:
        Z = jax.device_put(X, ds.try_gpu(1))  # the chapter's copy: explicit
        total = Y + Z
        assert ds.copy_if_needed(Z, ds.try_gpu(1)) is Z  # already there: the same array
        out = X @ params["w"] + params["b"]
    assert report.total == 0
    assert only_device(total) is gpus[1] and only_device(out) is gpus[0]
    assert ds.neutral_device(out) == ds.model_device(params)
    np.testing.assert_allclose(ds.to_numpy(out), np.full((2, 1), 1.5))
    np.testing.assert_allclose(ds.to_numpy(total), ds.to_numpy(Y) + 1.0)


def synthetic(n=64, seed=0):
    rng = np.random.default_rng(seed)
    true_w, true_b = np.array([2.0, -3.4], np.float32), np.float32(4.2)
    X = rng.standard_normal((n, 2)).astype(np.float32)
    y = (X @ true_w + true_b + 0.01 * rng.standard_normal(n)).astype(np.float32)
    return X, y[:, None], true_w, true_b


def loss(params, X, y):
    return jnp.mean((X @ params["w"] + params["b"] - y) ** 2) / 2


@jax.jit
def sgd_step(params, X, y):
    value, grads = jax.value_and_grad(loss)(params, X, y)
    return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads), value


def test_linear_regression_trains_on_a_virtual_gpu_under_disallow(gpus):
    """The chapter's loop: minibatches sent explicitly, a jitted step, the loss read explicitly."""
    X, y, true_w, true_b = synthetic()
    device = ds.try_gpu()
    params = ds.place_model({"w": jnp.zeros((2, 1)), "b": jnp.zeros((1,))}, device)
    losses = []
    with ds.transfer_guard("disallow") as report:
        for _epoch in range(30):
            for start in range(0, len(X), 16):
                Xb = jax.device_put(X[start:start + 16], device)
                yb = jax.device_put(y[start:start + 16], device)
                params, value = sgd_step(params, Xb, yb)
            losses.append(float(ds.to_numpy(value)))
    assert report.total == 0
    assert ds.neutral_device(jax.device_put(jnp.zeros(()), device)) == ds.model_device(params)
    np.testing.assert_allclose(ds.to_numpy(params["w"]).ravel(), true_w, atol=0.05)
    np.testing.assert_allclose(ds.to_numpy(params["b"]), [true_b], atol=0.05)
    assert losses[-1] < losses[0]


def test_an_eager_gradient_on_a_virtual_gpu_moves_nothing_from_the_host_cpu(gpus):
    """jax.grad outside jit makes its constants (the cotangent 1.0) on JAX's default device: on a
    GPU machine GPU 0, so nothing moves between devices. (It failed here with a device-to-device
    copy from host device 0 while the default device stayed the CPU.)"""
    w = jax.device_put(jnp.array([1.0, -2.0, 0.5]), ds.try_gpu())
    X = jax.device_put(jnp.ones((4, 3)), ds.try_gpu())
    y = jax.device_put(jnp.zeros((4,)), ds.try_gpu())

    def square_loss(w):
        r = X @ w - y
        return (r * r).sum()

    with ds.transfer_guard("disallow", host_to_device="allow") as report:
        g = jax.grad(square_loss)(w)
    assert only_device(g) is gpus[0] and report.total == 0
    np.testing.assert_allclose(ds.to_numpy(g), 2 * 4 * np.array([1.0, -2.0, 0.5]).sum() * np.ones(3))
    # Under plain "disallow" the constant JAX sends to the GPU is host data going to a device, as
    # on a GPU machine: refused as host-to-device, never as a copy between devices.
    with pytest.raises(ds.ImplicitTransferError, match="host-to-device copy to gpu:0"):
        with ds.transfer_guard("disallow"):
            jax.grad(square_loss)(w)

"""The D2L "GPUs" chapter (TensorFlow tab) and a linear-regression training loop after it, on
virtual GPUs, under ds.transfer_guard("disallow"), written as they run on a machine with two
GPUs: every op under the device scope it means (TensorFlow code places ops with `with device:`),
data sent to a device explicitly, results read explicitly.

With virtual GPUs TensorFlow's own pick for an op with no scope is /CPU:0, the host, where a GPU
machine picks GPU 0 (docs/tensorflow.md says why devshim cannot change that); the last test pins
that documented difference.

They run in the pass with DEVSHIM_VIRTUAL_DEVICES set (tox's second tensorflow pass).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import devshim as ds
from devshim import settings

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

pytestmark = pytest.mark.skipif(
    int(os.environ.get(settings.VIRTUAL_DEVICES_VAR, "0") or 0) < 2,
    reason=f"needs {settings.VIRTUAL_DEVICES_VAR}=2 or more (tox's second tensorflow pass sets it)")


@pytest.fixture
def gpus(setenv):
    setenv("DEVSHIM_DEVICE", None)
    with ds.use_backend("tensorflow"):
        devices = ds.try_all_gpus()
        assert [ds.get_backend().describe(d).virtual for d in devices[:2]] == [True, True]
        yield devices[:2]


def where(t) -> str:
    return str(ds.neutral_device(t))


def test_the_gpus_chapter_under_disallow(gpus):
    with ds.try_gpu():
        X = tf.ones((2, 3))
    with ds.try_gpu(1):
        Y = tf.random.uniform((2, 3))
    with pytest.raises(ds.DeviceMismatchError):
        with ds.transfer_guard("disallow"):
            with ds.try_gpu(1):
                X + Y  # X is on gpu:0: TensorFlow would copy it silently, the guard refuses
    net = ds.place_model(keras.Sequential([keras.layers.Dense(1)]), ds.try_gpu())
    with ds.transfer_guard("disallow") as report:
        Z = ds.to_device(X, ds.try_gpu(1))  # the explicit copy
        with ds.try_gpu(1):
            total = Y + Z
        assert ds.copy_if_needed(Z, ds.try_gpu(1)) is Z
        with ds.try_gpu():
            out = net(X)  # builds the weights on gpu:0, as the chapter's strategy scope does
    assert report.total == 0
    assert where(X) == where(out) == "gpu:0" and where(Z) == where(total) == "gpu:1"
    assert str(ds.neutral_device(ds.model_device(net))) == "gpu:0"
    np.testing.assert_allclose(ds.to_numpy(total), ds.to_numpy(Y) + 1.0)


def test_linear_regression_trains_on_a_virtual_gpu_under_disallow(gpus):
    rng = np.random.default_rng(0)
    true_w, true_b = np.array([[2.0], [-3.4]], np.float32), np.float32(4.2)
    features = rng.standard_normal((64, 2)).astype(np.float32)
    labels = features @ true_w + true_b
    device = ds.try_gpu()
    with device:
        w = tf.Variable(tf.zeros((2, 1)))
        b = tf.Variable(tf.zeros((1,)))
    losses = []
    with ds.transfer_guard("disallow") as report:
        for _epoch in range(30):
            for start in range(0, 64, 16):
                X = ds.convert(features[start:start + 16], "tensorflow", device=device)  # explicit
                y = ds.convert(labels[start:start + 16], "tensorflow", device=device)
                with device:
                    with tf.GradientTape() as tape:
                        loss = tf.reduce_mean((tf.matmul(X, w) + b - y) ** 2) / 2
                    dw, db = tape.gradient(loss, [w, b])
                    w.assign_sub(0.1 * dw)
                    b.assign_sub(0.1 * db)
            losses.append(float(ds.to_numpy(loss)))
    assert report.total == 0 and len(report.explicit) == 2 * 4 * 30
    assert where(w) == where(b) == "gpu:0"
    np.testing.assert_allclose(ds.to_numpy(w), true_w, atol=0.05)
    np.testing.assert_allclose(ds.to_numpy(b), [true_b], atol=0.05)
    assert losses[-1] < losses[0]


def test_an_op_with_no_scope_runs_on_the_host_with_virtual_gpus(gpus):
    """The documented difference: a GPU machine would run X + X on GPU 0."""
    with ds.try_gpu():
        X = tf.ones(3)
    assert where(X + X) == "cpu:0"
    with pytest.raises(ds.DeviceMismatchError, match="device-to-host"):
        with ds.transfer_guard("disallow"):
            X + X

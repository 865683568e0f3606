"""The D2L "GPUs" chapter's Keras examples (its TensorFlow tab, written with Keras 3 so that they run
on whichever framework Keras runs on: tox's interop env runs them with KERAS_BACKEND=torch, jax and
tensorflow, plain and on two virtual GPUs), under ds.transfer_guard("disallow"): tensors made on a
GPU with `keras.device`, copied explicitly, and a model whose parameters and outputs are on the
GPU its input is on. On a machine without a GPU, every "GPU" is the CPU, as the chapter's
try_gpu says.
"""

from __future__ import annotations

import numpy as np
import pytest

import devshim as ds
from devshim import backends

keras = pytest.importorskip("keras")
BACKEND = keras.backend.backend()
if BACKEND not in backends.specs() or not backends.specs()[BACKEND].is_installed():
    pytest.skip(f"Keras runs on {BACKEND}, which is no devshim backend here", allow_module_level=True)
ds.num_gpus(backend=BACKEND)  # virtual GPUs, if asked for, exist before Keras makes its first variable


def where(t) -> str:
    return str(ds.neutral_device(t))


def test_the_gpus_chapter_with_keras_under_disallow():
    with ds.use_backend(BACKEND):
        with keras.device(ds.try_gpu()):  # the chapter's `with try_gpu(): X = tf.ones((2, 3))`
            X = keras.ops.ones((2, 3))
        with keras.device(ds.try_gpu(1)):
            Y = keras.random.uniform((2, 3), seed=0)
        net = ds.place_model(keras.Sequential([keras.layers.Dense(1)]), ds.try_gpu())
        net(X)  # its first call builds it on the GPU (Keras reads its random seeds on the host to do so)
        with ds.transfer_guard("disallow") as report:
            Z = ds.to_device(X, ds.try_gpu(1))  # the explicit copy
            with keras.device(ds.try_gpu(1)):
                total = keras.ops.add(Y, Z)
            assert ds.copy_if_needed(Z, ds.try_gpu(1)) is Z
            out = net(X)  # "when the input is a tensor on the GPU, the model calculates on the same GPU"
        assert report.total == 0
        assert where(X) == where(out) == where(ds.try_gpu()) and where(Z) == where(total) == where(ds.try_gpu(1))
        # "the model parameters are stored on the same GPU"
        assert {where(w) for w in net.layers[0].weights} == {where(ds.try_gpu())}
        assert ds.model_device(net) == ds.device_of(X)
        np.testing.assert_allclose(ds.to_numpy(total), ds.to_numpy(Y) + 1.0, rtol=1e-6)

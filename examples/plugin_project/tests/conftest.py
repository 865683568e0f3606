"""The one framework-specific piece of the tests: making an array on a device."""

import numpy as np
import pytest


def make_array(backend, values, device):
    """``values`` as an array of ``backend``'s framework, made its own way on ``device``."""
    values = np.asarray(values, dtype=np.float32)
    if backend == "torch":
        import torch

        return torch.tensor(values, device=device)
    if backend == "tensorflow":
        import tensorflow as tf

        with device:
            return tf.constant(values)
    if backend == "jax":
        import jax

        return jax.device_put(values, device)
    if backend == "mxnet":
        import mxnet as mx

        return mx.np.array(values, ctx=device)
    return values


@pytest.fixture
def array(ds_backend):
    """``array(values, device)``: an array of the test's backend on ``device``."""
    return lambda values, device: make_array(ds_backend, values, device)

"""The operations ``devshim bench`` needs, in TensorFlow (imported only when an experiment runs).

TensorFlow runs an op without a device scope on its default device (GPU 0, or
the host), copying inputs there: each op here runs under the scope of its
first input's device, so it computes where its data is, as the experiments mean.
"""

from __future__ import annotations

import tensorflow as tf


def _scope(device):
    # devshim's TensorFlow devices are names; tf.device takes them, and plain names too.
    return tf.device(str(device))


def _where(x):
    return tf.device(x.device)


def rand(shape, device):
    """float32 normal samples of ``shape`` on ``device``."""
    with _scope(device):
        return tf.random.normal(shape)


def matmul(a, b):
    with _where(a):
        return tf.matmul(a, b)


def add(a, b):
    with _where(a):
        return tf.add(a, b)


def norm(x):
    """The Frobenius norm, left on the device."""
    with _where(x):
        return tf.norm(x)


def stack(xs):
    with _where(xs[0]):
        return tf.stack(xs)


def concat(xs):
    with _where(xs[0]):
        return tf.concat(xs, axis=0)


def split(x, sections):
    """``x`` split along axis 0 into pieces of the given sizes."""
    with _where(x):
        return tf.split(x, list(sections), axis=0)


def item(x):
    """The framework's implicit host read of a one-element tensor (TensorFlow has no item())."""
    return x.numpy().item()


# The framework's own spelling of devshim's calls: the overhead experiment's baselines.
# TensorFlow has no "copy only if needed": identity under a scope is the idiom for both.
def native_copy(x, device):
    with _scope(device):
        return tf.identity(x)


native_move = native_copy


def native_device_of(x):
    return x.device

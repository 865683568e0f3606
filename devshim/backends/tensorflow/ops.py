"""The operations ``devshim bench`` needs, in TensorFlow (imported only when an experiment runs)."""

from __future__ import annotations

import tensorflow as tf


def _scope(device):
    # devshim's TensorFlow devices are names; tf.device takes them, and plain names too.
    return tf.device(str(device))


def rand(shape, device):
    """float32 normal samples of ``shape`` on ``device``."""
    with _scope(device):
        return tf.random.normal(shape)


matmul = tf.matmul
add = tf.add


def norm(x):
    """The Frobenius norm, left on the device."""
    return tf.norm(x)


def stack(xs):
    return tf.stack(xs)


def concat(xs):
    return tf.concat(xs, axis=0)


def split(x, sections):
    """``x`` split along axis 0 into pieces of the given sizes."""
    return tf.split(x, list(sections), axis=0)


# The framework's own spelling of devshim's calls: the overhead experiment's baselines.
# TensorFlow has no "copy only if needed": identity under a scope is the idiom for both.
def native_copy(x, device):
    with _scope(device):
        return tf.identity(x)


native_move = native_copy


def native_device_of(x):
    return x.device

"""The operations `devshim bench` needs, in TensorFlow (imported only when an experiment runs).

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
    """float32 normal samples of `shape` on `device`."""
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
    """`x` split along axis 0 into pieces of the given sizes."""
    with _where(x):
        return tf.split(x, list(sections), axis=0)


def item(x):
    """The framework's implicit host read of a one-element tensor (TensorFlow has no item())."""
    return x.numpy().item()


def from_numpy(values, device):
    """A tensor holding a copy of NumPy array `values` (its dtype and shape), made on `device`."""
    with _scope(device):
        return tf.identity(tf.constant(values))


# A small model and its forward pass, for `devshim selftest`'s placement checks.
def small_model(n_in, n_out, seed=0):
    """An MLP (dense with ReLU, dense), built, with seeded weights (Keras is imported here)."""
    import keras
    import numpy as np

    rng = np.random.default_rng(seed)
    model = keras.Sequential([keras.Input((n_in,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(n_out)])
    model.set_weights([rng.standard_normal(w.shape).astype(np.float32) for w in model.get_weights()])
    return model


def forward(model, x):
    """`model(x)` under the scope of `x`'s device, where its weights are meant to be."""
    with _where(x):
        return model(x)

def train_step(model, x, y, lr=0.01):
    """One SGD step of `model` on squared error, under `x`'s device: forward and gradient
    (`tf.GradientTape`), then `assign_sub`. Returns `(loss, model)` (`devshim bench memory`).

    Example:
        >>> loss, model = train_step(model, x, y)
    """
    with _where(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        variables = model.trainable_variables
        for variable, grad in zip(variables, tape.gradient(loss, variables)):
            variable.assign_sub(lr * grad)
    return loss, model


# The framework's own spelling of devshim's calls: the overhead experiment's baselines.
# TensorFlow has no "copy only if needed": identity under a scope is the idiom for both.


def _identity_under(x, device):
    with _scope(device):  # TensorFlow's way to a device: an op under its scope
        return tf.identity(x)


def native_calls(x, device) -> dict:
    """What a user writes without devshim, as the timed callables of `devshim bench overhead`:
    `device_of`, `copy_if_needed` and `to_device` of `x` to `device`, each the
    framework's own expression written inline (no helper call in the baseline).

    Example:
        >>> native_calls(x, device)["device_of"]()
        '/job:localhost/replica:0/task:0/device:CPU:0'
    """
    return {
        "device_of": lambda: x.device,
        "copy_if_needed": lambda: _identity_under(x, device),
        "to_device": lambda: _identity_under(x, device),
    }


def native_copy_dict(leaves: dict, device) -> dict:
    """`{key: copy of value on device}` as a user writes it: a dict comprehension."""
    return {key: _identity_under(value, device) for key, value in leaves.items()}


def native_copy_lists(nest: dict, device) -> dict:
    """`{key: [copies on device]}` for a dict of lists of tensors, written out by hand."""
    return {key: [_identity_under(value, device) for value in values] for key, values in nest.items()}

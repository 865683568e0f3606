"""The operations `devshim bench` needs, in MXNet (imported only when an experiment runs).

They use the classic `mx.nd` front-end, which works whether or not `npx.set_np()`
was called in the thread running the experiment.
"""

from __future__ import annotations

import itertools

import mxnet as mx


def rand(shape, device):
    """float32 normal samples of `shape` on `device`."""
    return mx.nd.random.normal(shape=shape, ctx=device, dtype="float32")


matmul = mx.nd.dot
add = mx.nd.add


def norm(x):
    """The Frobenius norm, left on the device."""
    return mx.nd.norm(x)


def stack(xs):
    return mx.nd.stack(*xs)


def concat(xs):
    return mx.nd.concat(*xs, dim=0)


def split(x, sections):
    """`x` split along axis 0 into pieces of the given sizes."""
    bounds = [0, *itertools.accumulate(sections)]
    return [x[start:stop] for start, stop in zip(bounds, bounds[1:])]


def item(x):
    """The framework's implicit host read of a one-element array."""
    return x.asscalar()


def from_numpy(values, device):
    """An array holding a copy of NumPy array `values` (its dtype and shape), made on `device`."""
    return mx.nd.array(values, ctx=device, dtype=values.dtype)


def as_generic(x):
    """`x` in MXNet's NumPy front-end (`mx.np`), which `ds.array_module` serves; classic
    `mx.nd` arrays have no array module."""
    return x.as_np_ndarray()


# A small model and its forward pass, for `devshim selftest`'s placement checks.
def small_model(n_in, n_out, seed=0):
    """A Gluon MLP (dense with ReLU, dense), initialised on the CPU, seeded."""
    from mxnet import gluon

    mx.random.seed(seed)
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(8, in_units=n_in, activation="relu"), gluon.nn.Dense(n_out, in_units=8))
    net.initialize(ctx=mx.cpu())
    return net


def _as_block_input(x):
    """`x` in the front-end a Gluon block calls in this thread: with `npx.set_np()` on, its
    layers call `mx.np` operators, which refuse classic arrays (a view, no copy)."""
    return x.as_np_ndarray() if mx.util.is_np_array() and isinstance(x, mx.nd.NDArray) else x


def forward(model, x):
    return model(_as_block_input(x))


def train_step(model, x, y, lr=0.01):
    """One SGD step of a Gluon block on squared error: forward under `autograd.record`,
    backward, then each parameter's data less `lr` times its gradient. Returns
    `(loss, model)` (`devshim bench memory`).

    Example:
        >>> loss, model = train_step(model, x, y)
    """
    with mx.autograd.record():
        loss = ((model(_as_block_input(x)) - _as_block_input(y)) ** 2).mean()
    loss.backward()
    for parameter in model.collect_params().values():
        for data, grad in zip(parameter.list_data(), parameter.list_grad()):
            data[:] = data - lr * grad
    return loss, model


# The framework's own spelling of devshim's calls: the overhead experiment's baselines.


def native_calls(x, device) -> dict:
    """What a user writes without devshim, as the timed callables of `devshim bench overhead`:
    `device_of`, `copy_if_needed` and `to_device` of `x` to `device`, each the
    framework's own expression written inline (no helper call in the baseline).

    Example:
        >>> native_calls(x, device)["device_of"]()
        cpu(0)
    """
    return {
        "device_of": lambda: x.ctx,
        "copy_if_needed": lambda: x.as_in_context(device),
        "to_device": lambda: x.copyto(device),
    }


def native_copy_dict(leaves: dict, device) -> dict:
    """`{key: copy of value on device}` as a user writes it: a dict comprehension."""
    return {key: value.copyto(device) for key, value in leaves.items()}


def native_copy_lists(nest: dict, device) -> dict:
    """`{key: [copies on device]}` for a dict of lists of tensors, written out by hand."""
    return {key: [value.copyto(device) for value in values] for key, values in nest.items()}

"""The operations `devshim bench` needs, in JAX (imported only when an experiment runs)."""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np

from devshim.backends.jax.core import copying_put

_draws = itertools.count()


def rand(shape, device):
    """float32 normal samples of `shape`, computed on `device` (and committed there)."""
    # The key is made here, not at import: making an array starts JAX, and devshim must
    # configure virtual devices first (it has by now: `device` came from devshim).
    with jax.default_device(device):
        key = jax.random.PRNGKey(next(_draws))
        return jax.device_put(jax.random.normal(key, shape, dtype=jnp.float32), device)


def shaped(shape):
    """A float32 argument of `shape` holding no data, for `ds.estimate_memory` to compile a step
    against: a batch drawn from a fixed key inside the step is a constant that XLA folds while it
    compiles (before JAX 0.5, in time and host memory that grow with the batch)."""
    return jax.ShapeDtypeStruct(tuple(shape), jnp.float32)


matmul = jnp.matmul
add = jnp.add
stack = jnp.stack
concat = jnp.concatenate


def norm(x):
    """The Frobenius norm, left on the device."""
    return jnp.linalg.norm(x)


def split(x, sections):
    """`x` split along axis 0 into pieces of the given sizes."""
    return jnp.split(x, np.cumsum(sections)[:-1])


def item(x):
    """The framework's implicit host read of a one-element array."""
    return x.item()


def from_numpy(values, device):
    """An array holding a copy of NumPy array `values` (its dtype and shape), committed to `device`."""
    return jax.device_put(np.array(values, copy=True), device)


# A small model and its forward pass, for `devshim selftest`'s placement checks: JAX models
# are pytrees of parameters.
def small_model(n_in, n_out, seed=0):
    """An MLP's parameters (a dict of arrays) on the CPU, seeded."""
    rng = np.random.default_rng(seed)
    cpu = jax.devices("cpu")[0]
    shapes = {"w1": (n_in, 8), "b1": (8,), "w2": (8, n_out), "b2": (n_out,)}
    return {k: jax.device_put(rng.standard_normal(s).astype(np.float32), cpu) for k, s in shapes.items()}


def forward(params, x):
    hidden = jax.nn.relu(x @ params["w1"] + params["b1"])
    return hidden @ params["w2"] + params["b2"]

def train_step(params, x, y, lr=0.01):
    """One SGD step of `small_model`'s parameters on squared error: the loss and its gradient
    (`jax.value_and_grad`), then new parameters. Returns `(loss, params)` (`devshim bench memory`).

    Example:
        >>> loss, params = train_step(params, x, y)
    """
    def loss_of(p):
        return jnp.mean((forward(p, x) - y) ** 2)

    loss, grads = jax.value_and_grad(loss_of)(params)
    return loss, jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


# The framework's own spelling of devshim's calls: the overhead experiment's baselines.


def native_calls(x, device) -> dict:
    """What a user writes without devshim, as the timed callables of `devshim bench overhead`:
    `device_of`, `copy_if_needed` and `to_device` of `x` to `device`, each the
    framework's own expression written inline (no helper call in the baseline).

    Example:
        >>> native_calls(x, device)["device_of"]()
        CpuDevice(id=0)
    """
    put = _copy_put()
    return {
        "device_of": (lambda: x.device) if hasattr(x, "device") else (lambda: x.devices()),
        "copy_if_needed": lambda: jax.device_put(x, device),
        "to_device": lambda: put(x, device),
    }


@functools.cache
def _copy_put():
    """`jax.device_put(x, device, may_alias=False)`, or where that still hands the same buffer back
    (JAX 0.4.34 to 0.5.3) or JAX has no may_alias (0.4.31), a copy put there (`copying_put`).
    Made on first use, not at import: trying it makes an array, which starts JAX (see rand)."""
    return copying_put(jax)


def native_copy_dict(leaves: dict, device) -> dict:
    """`{key: copy of value on device}` as a user writes it: a dict comprehension."""
    put = _copy_put()
    return {key: put(value, device) for key, value in leaves.items()}


def native_copy_lists(nest: dict, device) -> dict:
    """`{key: [copies on device]}` for a dict of lists of tensors, written out by hand."""
    put = _copy_put()
    return {key: [put(value, device) for value in values] for key, values in nest.items()}

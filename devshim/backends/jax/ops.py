"""The operations ``devshim bench`` needs, in JAX (imported only when an experiment runs)."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np

_draws = itertools.count()


def rand(shape, device):
    """float32 normal samples of ``shape``, computed on ``device`` (and committed there)."""
    # The key is made here, not at import: making an array starts JAX, and devshim must
    # configure virtual devices first (it has by now: ``device`` came from devshim).
    with jax.default_device(device):
        key = jax.random.PRNGKey(next(_draws))
        return jax.device_put(jax.random.normal(key, shape, dtype=jnp.float32), device)


matmul = jnp.matmul
add = jnp.add


def norm(x):
    """The Frobenius norm, left on the device."""
    return jnp.linalg.norm(x)


def stack(xs):
    return jnp.stack(xs)


def concat(xs):
    return jnp.concatenate(xs)


def split(x, sections):
    """``x`` split along axis 0 into pieces of the given sizes."""
    return jnp.split(x, np.cumsum(sections)[:-1])


def item(x):
    """The framework's implicit host read of a one-element array."""
    return x.item()


# The framework's own spelling of devshim's calls: the overhead experiment's baselines.
def native_copy(x, device):
    return jax.device_put(x, device, may_alias=False)


def native_move(x, device):
    return jax.device_put(x, device)


def native_device_of(x):
    return x.device  # JAX 0.4.31 and later; older JAX has only x.devices()


if not hasattr(jax.Array, "device"):
    def native_device_of(x):  # noqa: F811
        (device,) = x.devices()
        return device

"""The operations ``devshim bench`` needs, in NumPy (imported only when an experiment runs)."""

from __future__ import annotations

import numpy as np

_rng = np.random.default_rng(0)


def rand(shape, device):
    """float32 normal samples of ``shape`` on ``device`` (the host)."""
    return _rng.standard_normal(shape, dtype=np.float32)


matmul = np.matmul
add = np.add


def norm(x):
    """The Frobenius norm, left where ``x`` is."""
    return np.linalg.norm(x)


def stack(xs):
    return np.stack(xs)


def concat(xs):
    return np.concatenate(xs)


def split(x, sections):
    """``x`` split along axis 0 into pieces of the given sizes."""
    bounds = np.cumsum(sections)[:-1]
    return np.split(x, bounds)


def item(x):
    """The framework's implicit host read of a one-element array."""
    return x.item()


def from_numpy(values, device):
    """A copy of NumPy array ``values`` (NumPy's only device is the host)."""
    return np.array(values, copy=True)


# The framework's own spelling of devshim's calls: the overhead experiment's baselines.
def native_copy(x, device):
    return x.copy()


def native_move(x, device):
    return np.asarray(x)


# NumPy 2 arrays have .device ("cpu"); NumPy 1 has no device query at all.
native_device_of = (lambda x: x.device) if hasattr(np.ndarray, "device") else None

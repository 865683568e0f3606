"""The operations ``devshim bench`` needs, in CuPy (imported only when an experiment runs).

The CPU is NumPy's: on ``"cpu"`` these make and take NumPy arrays, CuPy's host partner.
"""

from __future__ import annotations

import cupy
import numpy as np

_host_rng = np.random.default_rng(0)


def rand(shape, device):
    """float32 normal samples of ``shape`` on ``device`` (a NumPy array on the CPU)."""
    if isinstance(device, str):
        return _host_rng.standard_normal(shape, dtype=np.float32)
    with device:
        return cupy.random.standard_normal(shape, dtype=cupy.float32)


def _xp(x):
    return cupy if isinstance(x, cupy.ndarray) else np


def matmul(a, b):
    return _xp(a).matmul(a, b)


def add(a, b):
    return _xp(a).add(a, b)


def norm(x):
    """The Frobenius norm, left on the device."""
    return _xp(x).linalg.norm(x)


def stack(xs):
    return _xp(xs[0]).stack(xs)


def concat(xs):
    return _xp(xs[0]).concatenate(xs)


def split(x, sections):
    """``x`` split along axis 0 into pieces of the given sizes."""
    return _xp(x).split(x, [int(b) for b in np.cumsum(sections)[:-1]])



def item(x):
    """The framework's implicit host read of a one-element array."""
    return x.item()


def from_numpy(values, device):
    """A copy of NumPy array ``values`` on ``device`` (a NumPy array on the CPU)."""
    if isinstance(device, str):
        return np.array(values, copy=True)
    with device:
        return cupy.array(values, copy=True)


# CuPy's own spelling of devshim's calls: the overhead experiment's baselines.
def native_copy(x, device):
    if isinstance(device, str):
        return x.get()
    with device:
        return cupy.array(x, copy=True)


def native_move(x, device):
    if isinstance(device, str):
        return cupy.asnumpy(x)
    with device:
        return cupy.asarray(x)  # x itself when it is on this device already


def native_device_of(x):
    return x.device

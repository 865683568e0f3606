"""The operations `devshim bench` needs, in CuPy (imported only when an experiment runs).

The CPU is NumPy's: on `"cpu"` these make and take NumPy arrays, CuPy's host partner.
"""

from __future__ import annotations

import cupy
import numpy as np

_host_rng = np.random.default_rng(0)


def rand(shape, device):
    """float32 normal samples of `shape` on `device` (a NumPy array on the CPU)."""
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
    """`x` split along axis 0 into pieces of the given sizes."""
    return _xp(x).split(x, [int(b) for b in np.cumsum(sections)[:-1]])



def item(x):
    """The framework's implicit host read of a one-element array."""
    return x.item()


def from_numpy(values, device):
    """A copy of NumPy array `values` on `device` (a NumPy array on the CPU)."""
    if isinstance(device, str):
        return np.array(values, copy=True)
    with device:
        return cupy.array(values, copy=True)


# CuPy's own spelling of devshim's calls: the overhead experiment's baselines.


def _copy_on(x, device):
    if isinstance(device, str):
        return x.get()
    with device:
        return cupy.array(x, copy=True)


def _asarray_on(x, device):
    if isinstance(device, str):
        return cupy.asnumpy(x)
    with device:
        return cupy.asarray(x)  # x itself when it is on this device already


def native_calls(x, device) -> dict:
    """What a user writes without devshim, as the timed callables of `devshim bench overhead`:
    `device_of`, `copy_if_needed` and `to_device` of `x` to `device`, each the
    framework's own expression written inline (no helper call in the baseline).

    Example:
        >>> native_calls(x, device)["device_of"]()
        <CUDA Device 0>
    """
    return {
        "device_of": lambda: x.device,
        "copy_if_needed": lambda: _asarray_on(x, device),
        "to_device": lambda: _copy_on(x, device),
    }


def native_copy_dict(leaves: dict, device) -> dict:
    """`{key: copy of value on device}` as a user writes it: a dict comprehension."""
    return {key: _copy_on(value, device) for key, value in leaves.items()}


def native_copy_lists(nest: dict, device) -> dict:
    """`{key: [copies on device]}` for a dict of lists of tensors, written out by hand."""
    return {key: [_copy_on(value, device) for value in values] for key, values in nest.items()}

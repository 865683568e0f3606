"""The operations `devshim bench` needs, in NumPy (imported only when an experiment runs)."""

from __future__ import annotations

import numpy as np

_rng = np.random.default_rng(0)


def rand(shape, device):
    """float32 normal samples of `shape` on `device` (the host)."""
    return _rng.standard_normal(shape, dtype=np.float32)


matmul = np.matmul
add = np.add
stack = np.stack
concat = np.concatenate


def norm(x):
    """The Frobenius norm, left where `x` is."""
    return np.linalg.norm(x)


def split(x, sections):
    """`x` split along axis 0 into pieces of the given sizes."""
    return np.split(x, np.cumsum(sections)[:-1])


def item(x):
    """The framework's implicit host read of a one-element array."""
    return x.item()


def from_numpy(values, device):
    """A copy of NumPy array `values` (NumPy's only device is the host)."""
    return np.array(values, copy=True)


# The framework's own spelling of devshim's calls: the overhead experiment's baselines.


def native_calls(x, device) -> dict:
    """What a user writes without devshim, as the timed callables of `devshim bench overhead`:
    `device_of`, `copy_if_needed` and `to_device` of `x` to `device`, each the
    framework's own expression written inline (no helper call in the baseline).

    Example:
        >>> native_calls(x, device)["device_of"]()
        'cpu'
    """
    return {
        "device_of": (lambda: x.device) if hasattr(x, "device") else None,  # NumPy 1 has none
        "copy_if_needed": lambda: np.asarray(x),
        "to_device": lambda: x.copy(),
    }


def native_copy_dict(leaves: dict, device) -> dict:
    """`{key: copy of value on device}` as a user writes it: a dict comprehension."""
    return {key: value.copy() for key, value in leaves.items()}


def native_copy_lists(nest: dict, device) -> dict:
    """`{key: [copies on device]}` for a dict of lists of tensors, written out by hand."""
    return {key: [value.copy() for value in values] for key, values in nest.items()}

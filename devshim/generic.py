"""CPU/GPU generic code: `xp = ds.array_module(x)`, the way Chainer wrote it.

`array_module` answers with the module whose functions take `x`'s arrays:
`numpy` for NumPy arrays, `cupy` for CuPy arrays, and for the deep-learning
frameworks the array-API namespace of their arrays (`jax.numpy`,
`array_api_compat.torch`, TensorFlow's `tf.experimental.numpy`, MXNet's
`mxnet.numpy`). Each backend says which in `Backend.array_namespace`.

Example:
    >>> def softplus(x):
    ...     xp = ds.array_module(x)
    ...     return xp.maximum(0, x) + xp.log1p(xp.exp(-abs(x)))
"""

from __future__ import annotations

from devshim.backends import backend_for_tensor
from devshim.errors import MixedArrayModulesError

__all__ = ["array_module", "get_array_module"]

# Array type -> its module. Which module a type gets never changes within a process.
_module_for_type: dict = {}
# Leaves that are never arrays: skipped without a lookup (Chainer ignores them too).
_PLAIN = (int, float, complex, bool, type(None), str, bytes)


def array_module(*xs):
    """The array module for `xs`' arrays: numpy, cupy, or their framework's array-API namespace.

    Arguments that are not arrays (numbers, None) are ignored; with no array at
    all the answer is `numpy`, as in Chainer. NumPy arrays mixed with CuPy
    arrays give `cupy` (Chainer's rule: the GPU module, whose functions take
    both after `cupy.asarray`); any other mix of frameworks raises
    `MixedArrayModulesError`.

    Example:
        >>> xp = ds.array_module(x)          # numpy, cupy, jax.numpy, ...
        >>> y = xp.maximum(0, x) + xp.log1p(xp.exp(-abs(x)))
    """
    found = None
    for x in xs:
        if isinstance(x, _PLAIN):
            continue
        module = _module_for_type.get(type(x)) or _module_of(x)
        if module is None:
            continue
        if found is None or module is found:
            found = module
        else:
            found = _combine(found, module, xs)
    if found is None:
        import numpy

        return numpy
    return found


#: Chainer's name for `array_module`.
get_array_module = array_module


def _module_of(x):
    adapter = backend_for_tensor(x)
    if adapter is None:
        return None
    module = _module_for_type[type(x)] = adapter.array_namespace(x)
    return module


def _combine(first, second, xs):
    names = {first.__name__.split(".")[0], second.__name__.split(".")[0]}
    if names == {"numpy", "cupy"}:
        return first if first.__name__ == "cupy" else second
    kinds = ", ".join(sorted({f"{type(x).__module__}.{type(x).__qualname__}" for x in xs
                              if not isinstance(x, _PLAIN) and backend_for_tensor(x) is not None}))
    raise MixedArrayModulesError(
        f"array_module() got arrays of several frameworks ({kinds}), and no one array module "
        f"takes them all (only NumPy with CuPy mixes: the answer is cupy). Convert them to one "
        f"framework first, e.g. with ds.to_numpy(x) or the framework's asarray."
    )

"""`ds.convert` for JAX (the contract: `devshim.backends.interop_base.Interop`).

JAX arrays are immutable: a zero-copy NumPy view of one is read-only; a torch or MXNet
tensor sharing one is writable, and writing through it changes the JAX array behind
JAX's back (don't). Imports use `jax.dlpack.from_dlpack(obj, device=..., copy=False)`,
which refuses what it would have to copy.

Example:
    >>> pointer(ds.get_backend("jax"), jax.numpy.ones(2)) > 0
    True
"""

from __future__ import annotations

import jax

from devshim.backends.interop_base import Interop
from devshim.backends.jax.memory import buffer_start
from devshim.errors import CopyRequiredError

__all__ = ["JaxInterop"]


class JaxInterop(Interop):
    """JAX's side of `ds.convert` (the contract: `devshim.backends.interop_base.Interop`).

    Example:
        >>> ds.backends.interop("jax").immutable
        True
    """

    immutable = True

    def export(self, adapter, x):
        """The array itself (`jax.Array` has `__dlpack__`); tracers cannot be exported.

        Example:
            >>> export(adapter, jax.numpy.ones(2)).shape
            (2,)
        """
        if not hasattr(x, "sharding"):
            raise CopyRequiredError("x is a JAX tracer, which has no memory yet")
        if len(x.sharding.device_set) != 1:
            raise CopyRequiredError("x is spread over several devices")
        return x

    def adopt(self, adapter, obj, native, immutable: bool):
        """`jax.dlpack.from_dlpack(obj, device=native, copy=False)`.

        Example:
            >>> adopt(adapter, torch.ones(2), jax.devices("cpu")[0], False)
            Array([1., 1.], dtype=float32)
        """
        try:
            return jax.dlpack.from_dlpack(obj, device=native, copy=False)
        except (BufferError, RuntimeError, TypeError, ValueError) as error:
            raise CopyRequiredError(f"jax.dlpack.from_dlpack refused it ({error})") from None

    def from_host(self, adapter, array, native):
        """`jax.device_put(array, native)`: new storage on `native`.

        Example:
            >>> from_host(adapter, np.ones(2), jax.devices("cpu")[0])
            Array([1., 1.], dtype=float32)
        """
        return jax.device_put(array, native)

    def pointer(self, adapter, x):
        """`x.unsafe_buffer_pointer()`, or None.

        Example:
            >>> pointer(adapter, jax.numpy.ones(2)) > 0
            True
        """
        return buffer_start(x)

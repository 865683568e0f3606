"""`ds.convert` for TensorFlow (the contract: `devshim.backends.interop_base.Interop`).

Eager tensors export through `tf.experimental.dlpack.to_dlpack` and import through
`from_dlpack`, which takes dense row-major buffers only (a transposed torch view is
copied). TensorFlow tensors are immutable: a zero-copy NumPy view of one is read-only;
a torch or MXNet tensor sharing one is writable, and writing through it changes the
TensorFlow tensor (don't). Variables, composite and symbolic tensors are copied.

Example:
    >>> host_device(ds.get_backend("tensorflow"))
    '/CPU:0'
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from devshim.backends.interop_base import CapsuleProducer, Interop
from devshim.errors import CopyRequiredError, UnsupportedDtypeError

__all__ = ["TensorFlowInterop"]

_KDLCPU = 1



class TensorFlowInterop(Interop):
    """TensorFlow's side of `ds.convert` (the contract: `devshim.backends.interop_base.Interop`).

    Example:
        >>> ds.backends.interop("tensorflow").immutable
        True
    """

    immutable = True
    # TensorFlow's CPU kernels (Eigen) assume 64-byte-aligned buffers and abort the process on
    # others ("Check failed: IsAligned()"); its from_dlpack takes any, so devshim checks first.
    host_alignment = 64

    def export(self, adapter, x):
        """A DLPack producer for an eager tensor's buffer.

        Example:
            >>> export(adapter, tf.ones(2)).__dlpack_device__()
            (1, 0)
        """
        if not isinstance(x, tf.Tensor) or not getattr(x, "device", ""):
            raise CopyRequiredError(f"a {type(x).__name__} has no single eager buffer to share")
        described = adapter.tensor_device(x)
        try:
            capsule = tf.experimental.dlpack.to_dlpack(x)
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError, ValueError) as error:
            raise CopyRequiredError(f"TensorFlow cannot export it ({error.__class__.__name__})") from None
        device = (_KDLCPU, 0) if described.kind == "cpu" or described.virtual else (2, described.index)
        return CapsuleProducer(capsule, device)

    def adopt(self, adapter, obj, native, immutable: bool):
        """`tf.experimental.dlpack.from_dlpack` of `obj`'s capsule.

        Example:
            >>> adopt(adapter, torch.ones(2), adapter.cpu(), False)
            <tf.Tensor: shape=(2,), dtype=float32, numpy=array([1., 1.], dtype=float32)>
        """
        adapter.runtime()  # virtual GPUs asked for are set up before TensorFlow's first tensor
        try:
            return tf.experimental.dlpack.from_dlpack(obj.__dlpack__())
        except (BufferError, RuntimeError, TypeError, ValueError, tf.errors.OpError) as error:
            raise CopyRequiredError(f"TensorFlow's from_dlpack refused it ({error.__class__.__name__}: "
                                    f"{str(error).splitlines()[0] if str(error) else ''})") from None

    def from_host(self, adapter, array, native):
        """A tensor on `native` holding `array`'s values (made there with `tf.identity`).

        Example:
            >>> from_host(adapter, np.ones(2), adapter.cpu())
            <tf.Tensor: shape=(2,), dtype=float64, numpy=array([1., 1.])>
        """
        adapter.runtime()  # virtual GPUs asked for are set up before TensorFlow's first tensor
        try:
            host = tf.convert_to_tensor(array)
        except (TypeError, ValueError):
            raise UnsupportedDtypeError(
                f"TensorFlow has no {array.dtype} type, so this array cannot become a tf.Tensor. "
                f"Convert it to a dtype TensorFlow has first."
            ) from None
        return adapter.copy_to(host, native, False)

    def pointer(self, adapter, x):
        """The address of an eager tensor's first element in host memory; None on a real GPU.

        Example:
            >>> pointer(adapter, tf.ones(2)) > 0
            True
        """
        if not isinstance(x, tf.Tensor):
            return None
        described = adapter.tensor_device(x)
        if described.kind != "cpu" and not described.virtual:
            return None
        try:
            return np.asarray(x).__array_interface__["data"][0]
        except (TypeError, ValueError):
            return None

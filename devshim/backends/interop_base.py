"""The contract a backend's `interop.py` implements: `Interop`.

`ds.convert` (`devshim/conversion.py`) hands tensors between frameworks
through DLPack; what it needs from each framework is one subclass of
`Interop` in the backend's optional `interop.py` (the registry finds it:
`registry.interop`). `interop.py` is loaded only by `ds.convert`, so it
may import its framework at module level. Without one, `ds.convert` refuses
the framework's tensors.

Example:
    >>> interop = ds.backends.interop("numpy")
    >>> interop.export(ds.get_backend("numpy"), np.ones(3)).__dlpack_device__()
    (1, 0)
"""

from __future__ import annotations

from abc import ABC, abstractmethod

__all__ = ["Interop", "CapsuleProducer"]


class Interop(ABC):
    """One framework's side of `ds.convert` (the class a backend's `interop.py` defines).

    `adapter` arguments are the backend's `Backend`; devices are its native devices.

    Example:
        >>> ds.backends.interop("jax").immutable
        True
    """

    #: Whether the framework's arrays are immutable (JAX, TensorFlow): a zero-copy NumPy view
    #: of one is made read-only.
    immutable = False
    #: The alignment in bytes the framework's kernels assume of host memory it imports (None: any).
    #: `ds.convert` copies a host buffer that is not so aligned instead of sharing it:
    #: TensorFlow takes any buffer through DLPack, and its first op on a misaligned one aborts
    #: the process.
    host_alignment = None

    @abstractmethod
    def export(self, adapter, x):
        """An object with `__dlpack__`/`__dlpack_device__` viewing `x`'s memory, or
        `CopyRequiredError` saying why it cannot."""

    @abstractmethod
    def adopt(self, adapter, obj, native, immutable: bool):
        """A tensor of this framework on `native` sharing `obj`'s memory (`immutable`: the
        source's arrays are immutable), or `CopyRequiredError`."""

    @abstractmethod
    def from_host(self, adapter, array, native):
        """A tensor on `native` in new storage holding a NumPy array's exact values
        (`array` is a fresh copy the caller gives away); `UnsupportedDtypeError` for a
        dtype the framework lacks."""

    @abstractmethod
    def pointer(self, adapter, x):
        """The address of `x`'s first element, or None when unknown (`ds.convert` checks
        with it that a "shared" import really shares)."""

    def host_device(self, adapter):
        """The native device a tensor goes to when the framework has no array on its device:
        the CPU (`adapter.cpu()`) unless the framework says otherwise (CuPy refuses).

        Example:
            >>> ds.backends.interop("torch").host_device(ds.get_backend("torch"))
            device(type='cpu')
            >>> ds.backends.interop("jax").host_device(ds.get_backend("jax"))
            CpuDevice(id=0)
            >>> ds.backends.interop("tensorflow").host_device(ds.get_backend("tensorflow"))
            '/CPU:0'
            >>> ds.backends.interop("mxnet").host_device(ds.get_backend("mxnet"))
            cpu(0)
            >>> ds.backends.interop("numpy").host_device(ds.get_backend("numpy"))
            'cpu'
        """
        return adapter.cpu()


class CapsuleProducer:
    """A DLPack producer around a capsule a framework made (TensorFlow's and MXNet's export
    capsules, not objects), for importers that want an object with `__dlpack__`. The
    capsule can be taken once, as DLPack requires.

    Example:
        >>> producer = CapsuleProducer(tf.experimental.dlpack.to_dlpack(t), (1, 0))
        >>> torch.from_dlpack(producer)
        tensor([1., 2.])
    """

    __slots__ = ("capsule", "device", "_handed_out")

    def __init__(self, capsule, device) -> None:
        self.capsule, self.device, self._handed_out = capsule, device, None

    def __dlpack__(self, *args, **kwargs):
        capsule, self.capsule = self.capsule, None
        if capsule is None:
            raise BufferError("this DLPack capsule was consumed already")
        # Kept until the producer goes: an importer that refuses the capsule (NumPy 1.23
        # and MXNet's bool) drops it while its own error is set, and MXNet's deleter, a
        # ctypes callback, cannot run then, which leaked the array's memory. An importer
        # that takes the capsule renames it, and the deleter then leaves it alone.
        self._handed_out = capsule
        return capsule

    def __dlpack_device__(self):
        return self.device

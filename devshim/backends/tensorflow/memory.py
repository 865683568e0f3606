"""TensorFlow's memory figures (`ds.memory`, `ds.memory_peak`) and its out-of-memory error.

- GPUs: `tf.config.experimental.get_memory_info`, the allocator's `current` (in use) and
  `peak` (reset by `reset_memory_stats`). TensorFlow says neither a GPU's size nor what is
  free on it, nor what its allocator holds beyond what is in use.
- virtual GPUs (logical CPU devices, which share the one CPU allocator and keep no counts):
  the bytes of the live tensors and variables on each, found by a scan of the objects Python
  holds (tens of milliseconds in a large process). A buffer TensorFlow shares between tensors
  (`tf.identity`, a reshape) counts once per tensor: TensorFlow does not say which share one.
  Their size comes from `DEVSHIM_VIRTUAL_MEMORY` (reported, not enforced).
- the CPU: the process's and the machine's figures.

Out of memory is `tf.errors.ResourceExhaustedError`.
"""

from __future__ import annotations

import tensorflow as tf

from devshim.backends.memory_base import DeviceMemory, MemoryInfo, live_objects

__all__ = ["TensorflowMemory"]

_NO_MEMORY = (tf.resource, tf.variant, tf.string)


def _size(x):
    """Bytes of `x`'s elements (a tensor, a variable, a Keras variable), or None."""
    try:
        dtype = tf.as_dtype(x.dtype)
        if dtype in _NO_MEMORY:
            return None
        count = tf.TensorShape(x.shape).num_elements()
    except (TypeError, ValueError, AttributeError):
        return None
    return None if count is None else count * dtype.size


def _holders(found: list):
    """The live eager tensors and variables among `found`, each variable's memory once (a
    distributed variable and its handle's own variable share it)."""
    handles = set()
    for obj in found:
        if isinstance(obj, tf.Variable):
            try:
                handle = id(obj.handle)
            except (AttributeError, ValueError, RuntimeError):  # not initialised, or no resource
                continue
            if handle not in handles:
                handles.add(handle)
                yield obj
        elif not tf.is_symbolic_tensor(obj):  # graph tensors (inside tf.function) hold no memory
            yield obj


class TensorflowMemory(DeviceMemory):
    """TensorFlow's GPU allocator counts, and the live tensors on virtual GPUs.

    Example:
        >>> ds.backends.memory("tensorflow").is_out_of_memory(tf.errors.ResourceExhaustedError(None, None, "OOM"))
        True
    """

    free_hint = ("and TensorFlow takes most of a GPU when it starts: "
                 "tf.config.experimental.set_memory_growth(gpu, True) makes it take what it needs")
    live_source = "the live tensors and variables on it (a scan of Python's objects)"

    def accelerator_figures(self, adapter, native, device) -> MemoryInfo:
        try:
            found = tf.config.experimental.get_memory_info(f"GPU:{device.index}")
        except (ValueError, RuntimeError):
            found = {}
        return MemoryInfo(device, in_use=found.get("current"), peak=found.get("peak"),
                          source="tf.config.experimental.get_memory_info")

    def live_bytes(self, adapter, device):
        total = 0
        for obj in _holders(live_objects((tf.Tensor, tf.Variable))):
            size = _size(obj)
            if not size:
                continue
            try:
                place = adapter.tensor_device(obj)
            except Exception:  # noqa: BLE001 - a tensor TensorFlow is tearing down: not counted
                continue
            if place == device:
                total += size
        return total

    def reset_peak(self, adapter, native) -> bool:
        device = adapter.describe(native)
        if device.kind != "gpu" or device.virtual:
            return super().reset_peak(adapter, native)
        try:
            tf.config.experimental.reset_memory_stats(f"GPU:{device.index}")
        except (ValueError, RuntimeError):
            return False
        return True

    def is_out_of_memory(self, error: BaseException) -> bool:
        return isinstance(error, tf.errors.ResourceExhaustedError)

    def nbytes(self, x):
        return _size(x)

    def model_bytes(self, model):
        weights = getattr(model, "weights", None)
        if weights is None:
            return None
        sizes = [_size(w) for w in weights]
        return None if any(size is None for size in sizes) else sum(sizes)

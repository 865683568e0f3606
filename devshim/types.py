"""The names devshim's signatures use for what its functions take and return.

devshim imports a framework only when a call needs it, so its signatures cannot name the
frameworks' own classes. Each name here is documented, and is `Any` to type checkers: a
signature reads `to_device(x: Nest, device: DeviceSpec) -> Nest` rather than
`to_device(x: Any, device: Any) -> Any`, and your editor still accepts every framework's values.

Example:
    >>> from devshim.types import DeviceSpec, Tensor
    >>> def to_gpu(x: Tensor, where: DeviceSpec = "gpu") -> Tensor:
    ...     return ds.copy_if_needed(x, where)
"""

from __future__ import annotations

from typing import Any

__all__ = ["Tensor", "Nest", "DeviceSpec", "NativeDevice", "Model"]

Tensor = Any
"""A tensor of a framework devshim knows: `torch.Tensor` (an `nn.Parameter` too), `jax.Array`,
`tf.Tensor` and `tf.Variable`, MXNet's `mx.np.ndarray` and `mx.nd.NDArray`, `cupy.ndarray`
(and Numba's device arrays), `numpy.ndarray` and NumPy scalars."""

Nest = Any
"""A tensor, or a dict, list, tuple, namedtuple or dataclass (or another container devshim walks:
docs/tensors.md) of tensors and other values, at any depth. Non-tensor leaves are kept as they are."""

DeviceSpec = Any
"""Anything that names a device: `"cpu"`, `"gpu"`, `"gpu:1"`, a platform's name (`"cuda:0"`,
`"mps"`), `"meta"`, TensorFlow's and MXNet's spellings (`"/GPU:1"`, `"gpu(1)"`), a
framework's own device object (a `NativeDevice`), or a `ds.Device`."""

NativeDevice = Any
"""A framework's own device object, which goes into its calls (`device=`, `.to()`, `with`
blocks): `torch.device`, `jax.Device`, a TensorFlow device name that is also a `with` scope, an
`mx.Context`, a `cupy.cuda.Device`, NumPy's `"cpu"`. What `ds.try_gpu()`, `ds.device_of(x)`
and `ds.model_device(net)` return."""

Model = Any
"""A model devshim places: a torch `nn.Module`, a Gluon `Block`, a Keras model, or a pytree of
JAX arrays (its parameters)."""

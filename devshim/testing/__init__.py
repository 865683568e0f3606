"""Testing code on every framework and device: virtual GPUs, and the gradient checks of
Chainer's "define your own function" loop for every framework.

`virtual_devices(n)`           `n` virtual GPUs backed by host memory
                                 (like `DEVSHIM_VIRTUAL_DEVICES=n`).
`torch_device_tests(n)`        torch's `instantiate_device_type_tests` suites on
                                 `n` torch virtual GPUs too.
`assert_allclose(a, b)`        tensors of any framework on any device, mixed in one
                                 call, Python and NumPy scalars, nests of them.
`numerical_grad(f, xs, gys)`   central differences of `sum(f(*xs) * gys)`, one
                                 gradient per input in its framework, device and dtype.
`check_backward(f, xs)`        the framework's own autodiff against `numerical_grad`.
`check_double_backward(f, xs)` the same for the gradient of `f`'s backward (second order).

Every read of a tensor here is an explicit copy through devshim's transfer door, so
these work inside `ds.transfer_guard("disallow")`; the code under test is guarded as usual.
The guide is docs/testing-your-code.md.

Example:
    >>> ds.testing.assert_allclose(torch.ones(3, device=ds.try_gpu()), np.ones(3))
    >>> ds.testing.check_backward(lambda x, y: x * y + 1, (x, y))
"""

from typing import TYPE_CHECKING

from devshim._lazy import lazy_names
from devshim.testing.virtual import torch_device_tests, virtual_devices

if TYPE_CHECKING:  # what type checkers see; at run time the checks load on first use
    from devshim.testing.allclose import assert_allclose
    from devshim.testing.gradients import check_backward, check_double_backward, numerical_grad

__all__ = ["virtual_devices", "torch_device_tests", "assert_allclose", "numerical_grad", "check_backward",
           "check_double_backward"]

# Loaded on first use: virtual_devices, which runs before any framework starts, stays as light
# as it was (the checks import NumPy).
_EXPORTS = {"assert_allclose": "devshim.testing.allclose", "numerical_grad": "devshim.testing.gradients",
            "check_backward": "devshim.testing.gradients", "check_double_backward": "devshim.testing.gradients"}
__getattr__, __dir__ = lazy_names(globals(), _EXPORTS)

"""`ds.testing.virtual_devices`: testing multi-device code on a machine without several GPUs."""

from __future__ import annotations

from devshim import settings

__all__ = ["virtual_devices", "torch_device_tests"]


def virtual_devices(count: int) -> None:
    """Present `count` virtual accelerators backed by host memory, like
    `DEVSHIM_VIRTUAL_DEVICES=count` (and taking precedence over it).

    Call it before the backend first touches its devices: TensorFlow, for one,
    fixes its device list when it initialises. Backends that cannot present
    virtual devices (numpy) raise `ds.BackendError` when asked for
    devices afterwards. `virtual_devices(0)` turns the request off.

    Example:
        >>> ds.testing.virtual_devices(2)
        >>> ds.num_gpus(backend="tensorflow")
        2
    """
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        from devshim.errors import BackendError

        raise BackendError(f"virtual_devices() takes a non-negative int, not {count!r}.")
    settings.set_virtual_devices(count)


def torch_device_tests(count: int | None = None) -> None:
    """Run torch's device-generic tests (`instantiate_device_type_tests`) on torch virtual
    GPUs as well: registers `count` of them (default: `DEVSHIM_VIRTUAL_DEVICES`) and adds
    devshim's test base to torch's `TORCH_TEST_DEVICES`, so every such test class gets a
    `...PRIVATEUSE1` twin that runs on `vgpu:0` (`@deviceCountAtLeast(2)` tests on all).

    Call it in `conftest.py` (or atop the test module) before anything imports
    `torch.testing._internal`, which reads its device types once; later it raises
    `ds.BackendError` saying so. torch itself is not patched.

    Example:
        >>> ds.testing.torch_device_tests(2)
        >>> from torch.testing._internal.common_device_type import instantiate_device_type_tests
    """
    from devshim.backends.torch._virtual.device_tests import enable

    enable(count)

"""``ds.testing.virtual_devices``: testing multi-device code on a machine without several GPUs."""

from __future__ import annotations

from devshim import settings

__all__ = ["virtual_devices"]


def virtual_devices(count: int) -> None:
    """Present ``count`` virtual accelerators backed by host memory, like
    ``DEVSHIM_VIRTUAL_DEVICES=count`` (and taking precedence over it).

    Call it before the backend first touches its devices: TensorFlow, for one,
    fixes its device list when it initialises. Backends that cannot present
    virtual devices (numpy) raise ``ds.BackendError`` when asked for
    devices afterwards. ``virtual_devices(0)`` turns the request off.

    Example:
        >>> ds.testing.virtual_devices(2)
        >>> ds.num_gpus(backend="tensorflow")
        2
    """
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        from devshim.errors import BackendError

        raise BackendError(f"virtual_devices() takes a non-negative int, not {count!r}.")
    settings.set_virtual_devices(count)

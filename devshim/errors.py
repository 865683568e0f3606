"""Every error devshim raises.

Each class also derives from the built-in exception a caller would naturally
catch (``ValueError``, ``TypeError``, ``RuntimeError``), so code written
against plain Python exceptions keeps working.
"""

from __future__ import annotations

__all__ = [
    "DevshimError",
    "BackendError",
    "InvalidDeviceError",
    "DeviceUnavailableError",
    "DeviceMismatchError",
    "NotATensorError",
]


class DevshimError(Exception):
    """Base class of every error devshim raises.

    Example:
        >>> try:
        ...     ds.gpu(7)
        ... except ds.DevshimError as err:
        ...     print(err)
    """


class BackendError(DevshimError, ValueError):
    """A backend name is unknown, its framework is not installed, or it cannot
    do what was asked (for example virtual devices on torch)."""


class InvalidDeviceError(DevshimError, ValueError):
    """A device specification that devshim cannot read."""


class DeviceUnavailableError(DevshimError, RuntimeError):
    """A well-formed device that this machine (or backend) does not have."""


class DeviceMismatchError(DevshimError, RuntimeError):
    """Tensors that must share a device do not."""


class NotATensorError(DevshimError, TypeError):
    """A value that no installed backend recognises as a tensor."""

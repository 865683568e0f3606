"""Every setting devshim reads, in one place.

Environment variables are parsed once, the first time a setting is needed
(never at import, never on every call), and again on ``reload()``:

``DEVSHIM_BACKEND``          which framework functions without a tensor use.
``DEVSHIM_DEVICE``           ``cpu`` hides every accelerator; unset, ``auto`` or ``gpu`` does not.
``DEVSHIM_VIRTUAL_DEVICES``  N virtual accelerators backed by host memory (backends that can).
``DEVSHIM_TRANSFER_GUARD``   ``log`` or ``disallow``: the process's transfer-guard level (default ``allow``).

Choices scoped to a ``with`` block live in ContextVars here too (``use_backend``,
``transfer_guard``),
so a block in one thread or asyncio task never changes what another sees.

Example:
    >>> import os, devshim as ds
    >>> os.environ["DEVSHIM_DEVICE"] = "cpu"
    >>> ds.settings.reload()          # changes made after first use need a reload
    >>> ds.num_gpus()
    0
"""

from __future__ import annotations

import os
from contextvars import ContextVar

from devshim.errors import BackendError, InvalidDeviceError

__all__ = [
    "BACKEND_VAR", "DEVICE_VAR", "VIRTUAL_DEVICES_VAR", "TRANSFER_GUARD_VAR", "GUARD_LEVELS",
    "requested_backend", "accelerators_hidden", "virtual_device_count", "default_guard_level",
    "set_virtual_devices", "reload", "on_change", "scoped_backend", "scoped_guard",
]

BACKEND_VAR = "DEVSHIM_BACKEND"
DEVICE_VAR = "DEVSHIM_DEVICE"
VIRTUAL_DEVICES_VAR = "DEVSHIM_VIRTUAL_DEVICES"
TRANSFER_GUARD_VAR = "DEVSHIM_TRANSFER_GUARD"

#: Transfer-guard levels, from most to least permissive.
GUARD_LEVELS = ("allow", "log", "disallow")

#: The backend of the innermost ``use_backend`` block of this thread or task.
scoped_backend: ContextVar = ContextVar("devshim_backend", default=None)
#: The transfer-guard state of this thread or task (None: the process default).
scoped_guard: ContextVar = ContextVar("devshim_transfer_guard", default=None)

# Parsed environment: name -> value, or the exception to raise when it is used.
# A bad value only fails the functions that need it.
_parsed: dict = {}
_virtual_override = None  # set by ds.testing.virtual_devices(); wins over the environment
_listeners: list = []


def _parse_backend() -> object:
    value = os.environ.get(BACKEND_VAR, "").strip()
    return value or None


def _parse_device() -> object:
    value = os.environ.get(DEVICE_VAR, "").strip().lower()
    if value in ("", "auto", "gpu"):
        return False
    if value == "cpu":
        return True
    return InvalidDeviceError(
        f"{DEVICE_VAR}={os.environ[DEVICE_VAR]!r} is not understood. "
        f"Use {DEVICE_VAR}=cpu to hide accelerators, or unset it."
    )


def _parse_virtual() -> object:
    raw = os.environ.get(VIRTUAL_DEVICES_VAR, "").strip()
    if not raw:
        return 0
    try:
        count = int(raw)
    except ValueError:
        count = -1
    if count < 0:
        return BackendError(
            f"{VIRTUAL_DEVICES_VAR}={raw!r} must be a non-negative whole number, e.g. "
            f"{VIRTUAL_DEVICES_VAR}=2."
        )
    return count


def _parse_guard() -> object:
    from devshim.errors import InvalidGuardLevelError

    raw = os.environ.get(TRANSFER_GUARD_VAR, "").strip()
    value = raw.lower() or "allow"
    if value not in GUARD_LEVELS:
        return InvalidGuardLevelError(
            f"{TRANSFER_GUARD_VAR}={raw!r} is not a transfer-guard level. Valid levels: "
            f"{', '.join(GUARD_LEVELS)}; e.g. {TRANSFER_GUARD_VAR}=disallow, or unset it."
        )
    return value


_PARSERS = {"backend": _parse_backend, "device": _parse_device, "virtual": _parse_virtual,
            "guard": _parse_guard}


def _get(name: str):
    try:
        value = _parsed[name]
    except KeyError:
        value = _parsed[name] = _PARSERS[name]()
    if isinstance(value, Exception):
        raise type(value)(*value.args)
    return value


def requested_backend():
    """The name in ``DEVSHIM_BACKEND``, or None when unset.

    Example:
        >>> ds.settings.requested_backend()
        'torch'
    """
    return _get("backend")


def accelerators_hidden() -> bool:
    """True when ``DEVSHIM_DEVICE=cpu`` asks devshim to act as if no accelerator existed.

    Example:
        >>> ds.settings.accelerators_hidden()
        False
    """
    return _get("device")


def virtual_device_count() -> int:
    """How many virtual accelerators were asked for (0 when none).

    ``ds.testing.virtual_devices(n)`` takes precedence over ``DEVSHIM_VIRTUAL_DEVICES``.

    Example:
        >>> ds.settings.virtual_device_count()
        2
    """
    if _virtual_override is not None:
        return _virtual_override
    return _get("virtual")


def default_guard_level() -> str:
    """The process's transfer-guard level from ``DEVSHIM_TRANSFER_GUARD`` ("allow" when unset).

    Example:
        >>> ds.settings.default_guard_level()
        'allow'
    """
    return _get("guard")


def set_virtual_devices(count) -> None:
    """Ask for ``count`` virtual devices in this process (None: back to the environment).

    ``ds.testing.virtual_devices`` is the public way to call this.

    Example:
        >>> ds.settings.set_virtual_devices(2)
    """
    global _virtual_override
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 0):
        raise BackendError(f"virtual_devices() takes a non-negative int, not {count!r}.")
    if count != _virtual_override:
        _virtual_override = count
        _notify()


def reload() -> None:
    """Read the environment variables again, and forget what was derived from them.

    devshim reads its variables once, at first use. Call this after changing
    ``os.environ`` in a running process (tests do). A backend chosen with
    ``set_backend`` stays chosen; one chosen from ``DEVSHIM_BACKEND`` or
    automatically is chosen again at next use.

    Example:
        >>> os.environ["DEVSHIM_BACKEND"] = "numpy"
        >>> ds.settings.reload()
        >>> ds.get_backend().name
        'numpy'
    """
    _parsed.clear()
    _notify()


def on_change(listener) -> None:
    """Call ``listener()`` whenever settings change (``reload``, virtual devices).

    Modules that cache anything derived from settings (the backend registry,
    the adapters' resolved devices) register here.

    Example:
        >>> ds.settings.on_change(my_cache.clear)
    """
    if listener not in _listeners:
        _listeners.append(listener)


def _notify() -> None:
    for listener in list(_listeners):
        listener()

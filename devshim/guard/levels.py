"""The transfer guard's vocabulary: levels, directions and the kinds of implicit transfer.

The lowest piece of the guard: `devshim.settings` reads `DEVSHIM_TRANSFER_GUARD`
against these levels, so this module imports nothing of devshim's but its errors.

Example:
    >>> from devshim.guard.levels import LEVELS, check_level
    >>> LEVELS
    ('allow', 'log', 'disallow')
    >>> check_level("disallow", "the guard")
"""

from __future__ import annotations

from devshim.errors import InvalidGuardLevelError

__all__ = [
    "ALLOW", "LOG", "DISALLOW", "LEVELS", "DIRECTIONS",
    "READ", "OP_INPUT", "TO_DEVICE", "KINDS", "check_level",
]

#: Transfer-guard levels, from most to least permissive.
LEVELS = ("allow", "log", "disallow")
ALLOW, LOG, DISALLOW = LEVELS
#: The three directions a copy can take; each has its own level.
DIRECTIONS = ("device_to_host", "device_to_device", "host_to_device")
#: What a report counts: host reads, op inputs copied between devices, host data sent to a device.
READ, OP_INPUT, TO_DEVICE = "device-to-host read", "cross-device op input", "host-to-device"
KINDS = (OP_INPUT, READ, TO_DEVICE)


def check_level(level, what: str) -> None:
    """Raise `InvalidGuardLevelError` unless `level` is None or one of `LEVELS`.

    Example:
        >>> check_level("log", "device_to_host")
    """
    if level is not None and level not in LEVELS:
        raise InvalidGuardLevelError(
            f"Unknown transfer-guard level {level!r} for {what}. Valid levels: "
            f"{', '.join(repr(lv) for lv in LEVELS)}."
        )

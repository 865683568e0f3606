"""The guard levels in force for each thread or asyncio task.

A `transfer_guard` block sets a `GuardState` in a ContextVar, so a block
in one thread or task never changes what another sees; outside every block,
the process default from `DEVSHIM_TRANSFER_GUARD` applies.

Example:
    >>> from devshim.guard.state import current
    >>> current().checking
    False
"""

from __future__ import annotations

from contextvars import ContextVar

from devshim import settings
from devshim.guard.levels import ALLOW, DIRECTIONS

__all__ = ["GuardState", "Scope", "scoped", "current", "default", "forget_default"]

#: The `Scope` of this thread or task's innermost block (None: the process default).
scoped: ContextVar = ContextVar("devshim_transfer_guard", default=None)
_default = None  # the process default GuardState, from DEVSHIM_TRANSFER_GUARD


class GuardState:
    """The levels in force for this thread or task, and the reports collecting events.

    `checking` is False when every direction is "allow": hooks return at once.

    Example:
        >>> GuardState("log", "allow", "allow").checking
        True
    """

    __slots__ = ("device_to_host", "device_to_device", "host_to_device", "reports", "checking")

    def __init__(self, device_to_host: str, device_to_device: str, host_to_device: str,
                 reports: tuple = ()) -> None:
        self.device_to_host = device_to_host
        self.device_to_device = device_to_device
        self.host_to_device = host_to_device
        self.reports = reports
        self.checking = not (device_to_host == device_to_device == host_to_device == ALLOW)

    def level(self, direction: str) -> str:
        """The level of one direction ("device_to_host", ...).

        Example:
            >>> GuardState("log", "allow", "allow").level("device_to_host")
            'log'
        """
        return getattr(self, direction)

    def __repr__(self) -> str:
        levels = ", ".join(f"{direction}={getattr(self, direction)!r}" for direction in DIRECTIONS)
        return f"GuardState({levels})"


class Scope:
    """What a block puts in the ContextVar: its `GuardState` and the enclosing `Scope`.

    Only contexts hold a Scope (the block's own, and every copy of it: an asyncio
    task created inside the block, `contextvars.copy_context()`); hooks read
    `state` and never keep the Scope. So while a Scope lives, some context that
    can still run code has its levels, and a block that checks something keeps
    the hooks installed until its Scope is collected (`devshim.guard_block`).

    Example:
        >>> Scope(GuardState("log", "allow", "allow"), None).state.checking
        True
    """

    __slots__ = ("state", "outer", "__weakref__")

    def __init__(self, state: GuardState, outer) -> None:
        self.state = state
        self.outer = outer


def default() -> GuardState:
    """The process default, every direction at `DEVSHIM_TRANSFER_GUARD`'s level.

    Example:
        >>> default().device_to_host
        'allow'
    """
    global _default
    state = _default
    if state is None:
        level = settings.default_guard_level()
        state = _default = GuardState(level, level, level)
    return state


def forget_default() -> None:
    """Read `DEVSHIM_TRANSFER_GUARD` again at next use (after `settings.reload()`).

    Example:
        >>> forget_default()
    """
    global _default
    _default = None


def current() -> GuardState:
    """The guard state of this thread or asyncio task.

    Example:
        >>> with ds.transfer_guard("log"):
        ...     current().device_to_host
        'log'
    """
    scope = scoped.get()
    return scope.state if scope is not None else default()

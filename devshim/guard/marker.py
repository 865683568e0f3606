"""The explicit-transfer marker: "this copy was asked for", known in one place.

`devshim.transfer` (the door every explicit devshim transfer goes through)
runs copies under `explicit()` while a guard is watching; a backend's hook
that sees a copy while `is_explicit()` is True lets it through. Marking
costs nothing while no guard is watching (`watchers` is 0).

Example:
    >>> from devshim.guard import marker
    >>> with marker.explicit():
    ...     marker.is_explicit()
    True
"""

from __future__ import annotations

from _thread import _local, allocate_lock  # threading's own primitives, without its import cost

__all__ = ["explicit", "enter", "leave", "is_explicit", "watch", "unwatch", "watchers"]

_state = _local()
#: How many guards want explicit transfers marked (0: nobody is watching). Read on hot paths.
watchers = 0
_watch_lock = allocate_lock()


class explicit:
    """Mark the transfers inside the block as asked for (re-entrant, per thread).

    Example:
        >>> with explicit():
        ...     net.to(device)
    """

    __slots__ = ()

    def __enter__(self) -> "explicit":
        _state.depth = getattr(_state, "depth", 0) + 1
        return self

    def __exit__(self, *exc) -> None:
        _state.depth -= 1


def enter() -> None:
    """`explicit()`'s entry as a call, for a walk that marks only while a guard watches and
    leaves in a `finally` (`leave()`): the nest walk, which `with` would cost a call per nest.

    Example:
        >>> enter(); is_explicit(); leave()
        True
    """
    _state.depth = getattr(_state, "depth", 0) + 1


def leave() -> None:
    """`explicit()`'s exit as a call (after `enter()`).

    Example:
        >>> enter(); leave(); is_explicit()
        False
    """
    _state.depth -= 1


def is_explicit() -> bool:
    """Whether the current thread is inside an explicit devshim transfer.

    Example:
        >>> is_explicit()
        False
    """
    return getattr(_state, "depth", 0) > 0


def watch() -> None:
    """Start marking explicit transfers (the guard calls this when it starts checking).

    Example:
        >>> watch()
    """
    global watchers
    with _watch_lock:
        watchers += 1


def unwatch() -> None:
    """Stop marking explicit transfers for one watcher.

    Example:
        >>> unwatch()
    """
    global watchers
    with _watch_lock:
        watchers = max(0, watchers - 1)

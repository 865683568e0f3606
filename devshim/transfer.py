"""The one door every explicit devshim transfer goes through.

``to_device``, ``copy_if_needed``, ``to_numpy`` and everything built on them
(the experiments' host reads, model placement) move data by calling
``copy``, ``move`` or ``to_host`` here, or run under ``explicitly`` (the
nest walkers, which call the adapters leaf by leaf). So
"this copy was asked for" is known in exactly one place: while one of these
runs, ``is_explicit()`` is True in that thread, and a transfer guard that
sees a copy at such a moment lets it through.

Marking costs nothing while no guard is watching (``watchers`` is 0): the
functions then call the adapter straight away.

Example:
    >>> from devshim import transfer
    >>> transfer.is_explicit()
    False
"""

from __future__ import annotations

from _thread import _local, allocate_lock  # threading's own primitives, without its import cost

__all__ = ["copy", "move", "to_host", "explicitly", "explicit", "is_explicit", "watch", "unwatch",
           "crossing", "set_reporter"]

_state = _local()
#: How many transfer guards want explicit transfers marked (0: nobody is watching).
watchers = 0
_watch_lock = allocate_lock()
#: ``devshim.guard`` sets this when it is imported: it hears of ``crossing`` calls.
_reporter = None


def copy(adapter, x, native, non_blocking: bool):
    """``x`` copied to ``native`` in new storage (``to_device``).

    Example:
        >>> y = transfer.copy(ds.get_backend("torch"), x, torch.device("cpu"), False)
    """
    if watchers:
        with explicit():
            return adapter.copy_to(x, native, non_blocking)
    return adapter.copy_to(x, native, non_blocking)


def move(adapter, x, native):
    """``x`` copied to ``native``, called once ``copy_if_needed`` knows it is elsewhere.

    Example:
        >>> y = transfer.move(ds.get_backend("torch"), x, torch.device("cpu"))
    """
    if watchers:
        with explicit():
            return adapter.copy_to(x, native, False)
    return adapter.copy_to(x, native, False)


def to_host(adapter, x):
    """A NumPy copy of ``x``'s values (``to_numpy``).

    Example:
        >>> host = transfer.to_host(ds.get_backend("torch"), x)
    """
    if watchers:
        with explicit():
            return adapter.tensor_to_numpy(x)
    return adapter.tensor_to_numpy(x)


def explicitly(fn, *args):
    """``fn(*args)`` as one explicit transfer: what the nest walkers of
    ``to_device``, ``copy_if_needed`` and ``to_numpy`` run under, since they
    call the adapters leaf by leaf.

    Example:
        >>> transfer.explicitly(walk, nest, leaf_for, False)
    """
    if watchers:
        with explicit():
            return fn(*args)
    return fn(*args)


class explicit:
    """Mark the transfers inside the block as asked for (re-entrant, per thread).

    devshim's own helpers that move data without going through ``copy``,
    ``move`` or ``to_host`` (model placement calls ``module.to``) use this.

    Example:
        >>> with transfer.explicit():
        ...     net.to(device)
    """

    __slots__ = ()

    def __enter__(self) -> "explicit":
        _state.depth = getattr(_state, "depth", 0) + 1
        return self

    def __exit__(self, *exc) -> None:
        _state.depth -= 1


def is_explicit() -> bool:
    """Whether the current thread is inside an explicit devshim transfer.

    Example:
        >>> transfer.is_explicit()
        False
    """
    return getattr(_state, "depth", 0) > 0


def watch() -> None:
    """Start marking explicit transfers (a guard calls this when it starts watching).

    Example:
        >>> transfer.watch()
    """
    global watchers
    with _watch_lock:
        watchers += 1


def unwatch() -> None:
    """Stop marking explicit transfers for one watcher.

    Example:
        >>> transfer.unwatch()
    """
    global watchers
    with _watch_lock:
        watchers = max(0, watchers - 1)


def crossing(direction: str, what: str, source, target, *, explicit: bool, error=None) -> None:
    """Tell the transfer guard that ``ds.convert`` is about to copy data between two devices.

    An ``explicit`` crossing (the caller named ``device=``) is counted in the
    ``report.explicit`` of every enclosing ``transfer_guard`` block. Any other is
    checked like an implicit transfer: logged under "log", and refused under
    "disallow" by raising ``error``. Frameworks' own hooks never see these
    copies, so this is the only place they are counted. Call it outside
    ``explicit()``.

    Example:
        >>> transfer.crossing("device_to_host", "ds.convert(x, 'numpy')", gpu0, cpu0, explicit=True)
    """
    reporter = _reporter
    if reporter is not None:
        reporter(direction, what, source, target, explicit, error)


def set_reporter(fn) -> None:
    """Install the function ``crossing`` calls (``devshim.guard`` does, when imported).

    Example:
        >>> transfer.set_reporter(guard_hook)
    """
    global _reporter
    _reporter = fn

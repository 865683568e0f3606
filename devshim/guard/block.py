"""``ds.transfer_guard``: the block users write.

It sets the levels for its thread or asyncio task (``devshim.guard.state``),
collects a ``TransferReport``, and has the lifecycle install the backends'
hooks while it checks something. It sits above the backend registry, which it
asks to declare every backend before the hooks go in.

Example:
    >>> with ds.transfer_guard("disallow") as report:
    ...     y = ds.to_numpy(loss)      # explicit: allowed
"""

from __future__ import annotations

from devshim.backends import specs
from devshim.guard import lifecycle
from devshim.guard.levels import DIRECTIONS, check_level
from devshim.guard.report import TransferReport
from devshim.guard.state import GuardState, current, scoped

__all__ = ["transfer_guard"]


class transfer_guard:
    """Refuse (``"disallow"``), log (``"log"``) or allow (``"allow"``) the implicit
    transfers inside the block; the block yields a ``TransferReport``.

    ``level`` sets every direction; ``device_to_host=``, ``device_to_device=``
    and ``host_to_device=`` override one each. Directions given neither way
    keep the enclosing block's level (or ``DEVSHIM_TRANSFER_GUARD``'s). Blocks
    nest, and each restores the enclosing levels on exit, exceptions included.
    A block in one thread or asyncio task does not affect another. devshim's
    own copies (``to_device``, ``copy_if_needed``, ``to_numpy`` and what is
    built on them) are explicit and always allowed.

    Example:
        >>> with ds.transfer_guard("disallow"):
        ...     y = ds.to_numpy(loss)       # explicit: fine
        ...     float(loss)                 # ImplicitTransferError on a GPU tensor
        >>> with ds.transfer_guard("log", device_to_host="allow") as report:
        ...     train_step()
        >>> print(report)
    """

    __slots__ = ("_given", "_stack")

    def __init__(self, level=None, *, device_to_host=None, device_to_device=None,
                 host_to_device=None) -> None:
        check_level(level, "the guard")
        given = {"device_to_host": device_to_host, "device_to_device": device_to_device,
                 "host_to_device": host_to_device}
        for direction, value in given.items():
            check_level(value, direction)
            if value is None:
                given[direction] = level
        self._given = given
        self._stack: list = []

    def __enter__(self) -> TransferReport:
        outer = current()
        levels = [self._given[d] or outer.level(d) for d in DIRECTIONS]
        report = TransferReport(GuardState(*levels))
        state = GuardState(*levels, reports=outer.reports + (report,))
        token = scoped.set(state)
        checking = state.checking
        if checking:
            specs()  # every backend declared to the lifecycle, so frameworks in use get hooks
            lifecycle.activate()
            lifecycle.enter_thread()
        self._stack.append((token, checking, lifecycle.enter_block(state)))
        return report

    def __exit__(self, *exc) -> None:
        token, checking, entered = self._stack.pop()
        lifecycle.exit_block(entered)
        scoped.reset(token)
        if checking:
            lifecycle.exit_thread()
            lifecycle.deactivate()

"""`ds.transfer_guard`: the block users write, the guard's part above the backends.

(Its core, below the backends, is the `devshim.guard` package.)

It sets the levels for its thread or asyncio task (`devshim.guard.state`),
collects a `TransferReport`, and has the lifecycle install the backends'
hooks while it checks something. It sits above the backend registry, which it
asks to declare every backend before the hooks go in.

Example:
    >>> with ds.transfer_guard("disallow") as report:
    ...     y = ds.to_numpy(loss)      # explicit: allowed
"""

from __future__ import annotations

import weakref

from devshim.backends import specs
from devshim.errors import GuardBlockInUseError
from devshim.guard import lifecycle
from devshim.guard.levels import DIRECTIONS, check_level
from devshim.guard.report import TransferReport
from devshim.guard.state import GuardState, Scope, default, scoped

__all__ = ["transfer_guard"]


class _Entry(Scope):
    """One entry of a block: the Scope it sets, and what its exit must undo."""

    __slots__ = ("owner", "entered")


class transfer_guard:
    """Refuse (`"disallow"`), log (`"log"`) or allow (`"allow"`) the implicit
    transfers inside the block; the block yields a `TransferReport`.

    `level` sets every direction; `device_to_host=`, `device_to_device=`
    and `host_to_device=` override one each. Directions given neither way
    keep the enclosing block's level (or `DEVSHIM_TRANSFER_GUARD`'s). Blocks
    nest, and each restores the enclosing levels on exit, exceptions included.
    A block in one thread or asyncio task does not affect another; an asyncio
    task created inside a block keeps the block's levels for as long as it runs.
    devshim's own copies (`to_device`, `copy_if_needed`, `to_numpy` and
    what is built on them) are explicit and always allowed.

    One block object may be entered in several threads or tasks at once: each
    entry is its own, kept in the context that entered it.

    Example:
        >>> with ds.transfer_guard("disallow"):
        ...     y = ds.to_numpy(loss)       # explicit: fine
        ...     float(loss)                 # ImplicitTransferError on a GPU tensor
        >>> with ds.transfer_guard("log", device_to_host="allow") as report:
        ...     train_step()
        >>> print(report)
    """

    __slots__ = ("_given",)

    def __init__(self, level=None, *, device_to_host=None, device_to_device=None,
                 host_to_device=None) -> None:
        check_level(level, "the guard")
        given = dict(zip(DIRECTIONS, (device_to_host, device_to_device, host_to_device)))
        for direction, value in given.items():
            check_level(value, direction)
        self._given = {direction: level if value is None else value for direction, value in given.items()}

    def __enter__(self) -> TransferReport:
        outer_scope = scoped.get()
        outer = outer_scope.state if outer_scope is not None else default()
        to_host, between, to_device = [self._given[d] or outer.level(d) for d in DIRECTIONS]
        report = TransferReport(GuardState(to_host, between, to_device))
        state = GuardState(to_host, between, to_device, reports=outer.reports + (report,))
        entry = _Entry(state, outer_scope)
        entry.owner = self
        if state.checking:
            specs()  # every backend declared to the lifecycle, so frameworks in use get hooks
            lifecycle.activate()
            # The hooks stay while any context holds this entry: this one until the block
            # exits, and every copy of it (an asyncio task created inside the block) until
            # that copy is collected. CPython frees an entry as soon as the last goes.
            weakref.finalize(entry, lifecycle.deactivate).atexit = False
            lifecycle.enter_thread()
        entry.entered = lifecycle.enter_block(state)
        scoped.set(entry)
        return report

    def __exit__(self, exc_type, error, traceback) -> None:
        entry = scoped.get()
        if not isinstance(entry, _Entry) or entry.owner is not self:
            raise GuardBlockInUseError(
                "This transfer_guard object is being exited in a thread or asyncio task where it is "
                "not the innermost block entered (its __enter__ and __exit__ ran in different "
                "contexts). Use it as a `with` block, one per thread or task: "
                "`with ds.transfer_guard(\"disallow\"):` inside each."
            )
        # A framework's own guard refusing a transfer (JAX's, raised from its C++ dispatch)
        # leaves the block as devshim's error, recorded in the reports; read before the
        # block's levels are gone.
        translated = lifecycle.translate(entry.entered, error) if error is not None and entry.entered else None
        lifecycle.exit_block(entry.entered)
        scoped.set(entry.outer)
        if entry.state.checking:
            lifecycle.exit_thread()
        if translated is not None:
            raise translated from error

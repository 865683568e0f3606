"""The one door every explicit devshim transfer goes through.

`to_device`, `copy_if_needed`, `to_numpy` and everything built on them
(the experiments' host reads, model placement) copy data inside `explicit()`
(a lone tensor's copy, `ds.convert`'s, model placement's `module.to`), between
`enter()` and `leave()` (the nest walk, as one transfer), by calling `to_host`
here, or under `explicitly` (what `ds.testing` writes to its tensors). So "this
copy was asked for" is known in exactly one place: while one of these runs, the
guard's marker (`devshim.guard.marker`) says so in that thread, and a transfer
guard that sees a copy at such a moment lets it through.

`ds.convert`'s copies between devices, which no framework hook sees, are told to
the guard with `crossing` (`devshim.guard.report.crossing`, offered here).

Marking costs nothing while no guard is watching: the functions then call the
adapter straight away.

Example:
    >>> from devshim import transfer
    >>> transfer.is_explicit()
    False
"""

from __future__ import annotations

from devshim.guard import marker
from devshim.guard.marker import enter, explicit, is_explicit, leave
from devshim.guard.report import crossing

__all__ = ["to_host", "explicitly", "explicit", "enter", "leave", "is_explicit", "crossing"]


def to_host(adapter, x):
    """A NumPy copy of `x`'s values (`to_numpy`).

    Example:
        >>> host = transfer.to_host(ds.get_backend("torch"), x)
    """
    if marker.watchers:
        with explicit():
            return adapter.tensor_to_numpy(x)
    return adapter.tensor_to_numpy(x)


def explicitly(fn, *args):
    """`fn(*args)` as one explicit transfer: what the nest walkers of
    `to_device`, `copy_if_needed` and `to_numpy` run under, since they
    call the adapters leaf by leaf.

    Example:
        >>> transfer.explicitly(walk, nest, leaf_for, False)
    """
    if marker.watchers:
        with explicit():
            return fn(*args)
    return fn(*args)

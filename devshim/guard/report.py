"""What the guard does with an implicit transfer: count it, log it, or refuse it.

Backends' hooks call `implicit(...)` for each implicit transfer they are about
to let happen; the levels in force for the calling thread or task decide, and
every report of the enclosing blocks records the event with the user's
`file:line`. A hook that calls the framework after deciding uses the two halves
instead: `check(...)` before the call (under "disallow" it raises, before anything
moves) and `logged(pending)` once the call returned, so that under "log" a transfer the
framework then refused (an op on tensors it will not combine) is neither warned about nor
counted: the log says only what happened. `check_move` checks an op input's copy between
two devices, `run_logged` runs the framework between the halves, and `read_checked` does
all of it for a host read.

Example:
    >>> from devshim.guard.report import implicit, READ
    >>> implicit("device_to_host", READ, "float(t)", gpu0, cpu0)   # under "disallow": raises
    >>> pending = check("device_to_device", OP_INPUT, "add", gpu1, gpu0)
    >>> result = framework_add(x, y)      # raises: nothing is logged
    >>> logged(pending)                   # returned: now the warning, and the report's event
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from _thread import allocate_lock
from typing import Optional

from devshim._device import Device
from devshim.errors import DeviceMismatchError, ImplicitTransferError, ImplicitTransferWarning
from devshim.guard import lifecycle, marker
from devshim.guard.levels import ALLOW, DIRECTIONS, DISALLOW, KINDS, LOG, OP_INPUT, READ, TO_DEVICE
from devshim.guard.state import GuardState, current

__all__ = [
    "TransferEvent", "TransferReport", "implicit", "check", "logged", "check_move", "run_logged",
    "read_checked", "crossing", "read_name", "direction_of", "READ", "OP_INPUT", "TO_DEVICE", "KINDS",
]

_DEVSHIM_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_warned_lock = allocate_lock()
_warned_sites: set = set()
_WARNED_LIMIT = 10_000


class TransferEvent:
    """One implicit transfer: its `kind` (one of `KINDS`), `direction`, `what`
    did it (`"float(t)"`, an op's name), `source` and `target` devices, the
    `site` ("file:line" in the code that made it) and what the guard did
    (`"logged"` or `"refused"`).

    Example:
        >>> report.events[0].site
        'train.py:12'
    """

    __slots__ = ("kind", "direction", "what", "source", "target", "site", "action")

    def __init__(self, kind, direction, what, source, target, site, action) -> None:
        self.kind, self.direction, self.what = kind, direction, what
        self.source, self.target, self.site, self.action = source, target, site, action

    def __repr__(self) -> str:
        return (f"TransferEvent({self.kind!r}, {self.what!r}, {self.source} -> {self.target}, "
                f"at {self.site}, {self.action})")


class TransferReport:
    """What a `transfer_guard` block saw: every implicit transfer, counted by kind and call site.

    Example:
        >>> with ds.transfer_guard("log") as report:
        ...     float(loss_on_gpu)
        >>> report.total, report.counts["device-to-host read"]
        (1, 1)
        >>> print(report)
        1 implicit transfer (device_to_host=log, device_to_device=log, host_to_device=log)
          device-to-host read  1  float(t) gpu:0 -> cpu:0 at train.py:12
    """

    def __init__(self, state: GuardState) -> None:
        self.levels = {direction: state.level(direction) for direction in DIRECTIONS}
        self.events: list = []
        #: Explicit copies between devices made by `ds.convert(..., device=)` (`action` "explicit");
        #: not implicit transfers, so not in `total`.
        self.explicit: list = []

    @property
    def total(self) -> int:
        """How many implicit transfers the block saw.

        Example:
            >>> with ds.transfer_guard("log") as report:
            ...     float(x_on_gpu)
            >>> report.total
            1
        """
        return len(self.events)

    @property
    def counts(self) -> dict:
        """kind -> how many, for each of `KINDS` (zeros included).

        Example:
            >>> report.counts
            {'cross-device op input': 0, 'device-to-host read': 1, 'host-to-device': 0}
        """
        return {**dict.fromkeys(KINDS, 0), **Counter(event.kind for event in self.events)}

    @property
    def sites(self) -> dict:
        """(kind, what, source, target, site) -> how many times, in the order first seen.

        Example:
            >>> report.sites
            {('device-to-host read', 'float(t)', 'gpu:0', 'cpu:0', 'train.py:31'): 1}
        """
        return dict(Counter((e.kind, e.what, str(e.source), str(e.target), e.site) for e in self.events))

    def __len__(self) -> int:
        return len(self.events)

    def __str__(self) -> str:
        levels = ", ".join(f"{d}={lv}" for d, lv in self.levels.items())
        lines = [f"{self.total} implicit transfer{'s' if self.total != 1 else ''} ({levels})"]
        for (kind, what, source, target, site), count in self.sites.items():
            lines.append(f"  {kind:<22} {count:>4}  {what} {source} -> {target} at {site}")
        if self.explicit:
            lines.append(f"  and {len(self.explicit)} explicit conversion{'s' if len(self.explicit) != 1 else ''} "
                         f"between devices (report.explicit)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<TransferReport {self.total} implicit transfers {self.counts}>"


def implicit(direction: str, kind: str, what: str, source, target, state: Optional[GuardState] = None,
             error: Optional[Exception] = None) -> None:
    """Report an implicit transfer about to happen; raise if the level refuses it.

    Backends' hooks call this (after checking `state.checking` and that the
    tensor really is elsewhere). It does nothing for explicit transfers
    (`marker.is_explicit()`) or where the direction's level is "allow". Under
    "disallow" it raises `error` when given (an exception, or a callable making one from
    the `TransferEvent`, which knows the call site), else the guard's own error. A hook
    that makes the transfer by calling the framework afterwards, which may still refuse it,
    uses `check` and `logged` instead.

    Example:
        >>> implicit("device_to_host", READ, "float(t)", gpu0, cpu0)
    """
    logged(check(direction, kind, what, source, target, state, error))


class Pending:
    """A transfer `check` let through under "log", to be recorded by `logged` once it happened.

    Example:
        >>> pending = check("device_to_host", READ, "float(t)", gpu0, cpu0)
        >>> pending.event.action
        'logged'
    """

    __slots__ = ("event", "reports")

    def __init__(self, event: TransferEvent, reports: tuple) -> None:
        self.event, self.reports = event, reports


def check(direction: str, kind: str, what: str, source, target, state: Optional[GuardState] = None,
          error: Optional[Exception] = None) -> Optional[Pending]:
    """The first half of `implicit`, for a transfer the framework makes after the hook
    returns: under "disallow" it records and raises now, before anything moves; under "log"
    it returns a `Pending` for `logged` to record (and warn about) once the framework's
    call returned; None where nothing is to be recorded ("allow", an explicit transfer).

    Example:
        >>> pending = check("device_to_device", OP_INPUT, "add", gpu1, gpu0)
        >>> out = original_add(x, y)     # PyTorch may refuse: then nothing was logged
        >>> logged(pending)
    """
    state = current() if state is None else state
    level = getattr(state, direction)
    if level == ALLOW or marker.is_explicit():
        return None
    action = "refused" if level == DISALLOW else "logged"
    event = TransferEvent(kind, direction, what, source, target, _user_site(), action)
    if level == LOG:
        return Pending(event, state.reports)
    for report in state.reports:
        report.events.append(event)
    refusal = _error if error is None else error
    raise refusal(event) if callable(refusal) else refusal


def logged(pending) -> None:
    """The second half: record in the reports, and warn once per call site, the transfers
    `check` let through (a `Pending`, None, or a list of them, its Nones skipped), now that
    they happened.

    Example:
        >>> logged(check("device_to_host", READ, "float(t)", gpu0, cpu0))
    """
    for one in (pending if isinstance(pending, list) else (pending,)):
        if one is None:
            continue
        for report in one.reports:
            report.events.append(one.event)
        _warn_once(one.event)


def check_move(source, target, what: str, state: Optional[GuardState] = None) -> Optional[Pending]:
    """`check` an op's input about to be copied from `source` to `target` (two `ds.Device`s),
    in the direction and of the kind `direction_of` gives.

    Example:
        >>> pending = check_move(gpu1, gpu0, "tf op AddV2")
    """
    direction, kind = direction_of(source, target)
    return check(direction, kind, what, source, target, state)


def run_logged(pending, fn, /, *args, **kwargs):
    """`fn(*args, **kwargs)`, the framework making the transfers `check` let through, then
    `pending` recorded: only once the framework ran it (one it refuses, or that fails, moved nothing).
    (`fn`'s keyword arguments may have any name: the first two are positional only.)

    Example:
        >>> result = run_logged(check_move(gpu1, gpu0, "add"), torch_add, x, y)
    """
    result = fn(*args, **kwargs)
    logged(pending)
    return result


def read_checked(what: str, place, state: GuardState, read, /, *args, **kwargs):
    """`read(*args, **kwargs)`, a host read of a tensor on `place` (a device, not the host),
    checked first (refused under "disallow"), made as explicit (the reads the framework makes
    inside are this one), then logged: only a read the framework made.

    Example:
        >>> value = read_checked("float(t)", gpu0, current(), torch_float, t)
    """
    pending = check("device_to_host", READ, what, place, Device("cpu"), state)
    with marker.explicit():
        value = read(*args, **kwargs)
    logged(pending)
    return value


def crossing(direction: str, what: str, source, target, *, explicit: bool, error=None) -> None:
    """A copy between devices that no framework hook sees (`ds.convert`'s), about to happen.

    An `explicit` one (the caller named `device=`) is recorded in the
    `explicit` list of every enclosing block's report. Any other is checked
    like an implicit transfer: logged under "log", refused under "disallow" by
    raising `error`.

    Frameworks' own hooks never see these copies (they go through DLPack or the host), so
    this is where they are counted; `devshim.transfer` offers it to `ds.convert`, which calls
    it outside `explicit()`.

    Example:
        >>> crossing("device_to_host", "ds.convert(x, 'numpy')", gpu0, cpu0, explicit=True)
    """
    state = current()
    if explicit:
        if state.reports:
            event = TransferEvent("explicit conversion", direction, what, source, target,
                                  _user_site(), "explicit")
            for report in state.reports:
                report.explicit.append(event)
        return
    kind = READ if direction == "device_to_host" else TO_DEVICE if direction == "host_to_device" else OP_INPUT
    implicit(direction, kind, what, source, target, state, error=error)


def read_name(readers: dict, fallback: str, depth: int = 6) -> str:
    """How a host read looks in the user's code, from the framework's frames above the hook.

    `readers` maps the framework's method names (`"__float__"`) to what the
    user wrote (`"float(t)"`); the outermost one found within `depth` frames
    wins, since a framework's readers call each other (float -> item -> asnumpy).

    Example:
        >>> read_name({"__float__": "float(t)"}, "t.numpy()")
        'float(t)'
    """
    frame = sys._getframe(2)
    found = None
    for _ in range(depth):
        if frame is None:
            break
        found = readers.get(frame.f_code.co_name, found)
        frame = frame.f_back
    return found or fallback


def direction_of(source, target) -> tuple:
    """(direction, kind) of an op input moving from `source` to `target` (two `ds.Device`s).

    Between two host devices (MXNet's `cpu(0)` and `cpu(1)`) it is a copy between
    devices all the same.

    Example:
        >>> direction_of(ds.Device("cpu"), ds.Device("gpu", 0))
        ('host_to_device', 'host-to-device')
    """
    host_source, host_target = source.kind == "cpu", target.kind == "cpu"
    if host_source and not host_target:
        return "host_to_device", TO_DEVICE
    if host_target and not host_source:
        return "device_to_host", OP_INPUT
    return "device_to_device", OP_INPUT


def _error(event: TransferEvent) -> Exception:
    if event.kind == READ:
        return ImplicitTransferError(
            f"{event.what} reads a tensor on {event.source} on the host: an implicit "
            f"device-to-host copy, refused by ds.transfer_guard at {event.site}. Copy it "
            f"explicitly with ds.to_numpy(t) (or ds.to_device(t, 'cpu')), or allow these reads "
            f"with ds.transfer_guard(device_to_host='allow')."
        )
    return DeviceMismatchError(
        f"{event.what} has inputs on {event.source} and on {event.target}: running it would copy "
        f"the input on {event.source} to {event.target} implicitly ({event.direction.replace('_', '-')}), "
        f"refused by ds.transfer_guard at {event.site}. Copy it explicitly first, e.g. "
        f"x = ds.copy_if_needed(x, ds.device('{event.target}')), or allow it with "
        f"ds.transfer_guard({event.direction}='allow')."
    )


def _warn_once(event: TransferEvent) -> None:
    key = (event.kind, event.site)
    with _warned_lock:
        if key in _warned_sites:
            return
        if len(_warned_sites) >= _WARNED_LIMIT:
            _warned_sites.clear()
        _warned_sites.add(key)
    filename, _, line = event.site.rpartition(":")
    message = (f"implicit {event.kind}: {event.what} copies {event.source} -> {event.target}. "
               f"Make it explicit (ds.to_numpy, ds.copy_if_needed) or allow it in ds.transfer_guard.")
    import warnings

    warnings.warn_explicit(message, ImplicitTransferWarning, filename or "<unknown>",
                           int(line) if line.isdigit() else 0)


def _user_site() -> str:
    """"file:line" of the innermost frame outside devshim and the frameworks in use."""
    roots = (_DEVSHIM_ROOT,) + tuple(os.path.abspath(root) + os.sep for root in lifecycle.framework_files())
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith("<") and not os.path.abspath(filename).startswith(roots):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>:0"

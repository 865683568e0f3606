"""``ds.transfer_guard``: copies nobody asked for fail, or are logged, on every backend.

A transfer is *explicit* when devshim makes it for you (``to_device``,
``copy_if_needed``, ``to_numpy``, and everything built on them); those go
through ``devshim.transfer``, which marks them. Every other copy is
*implicit*: a framework reading a GPU tensor on the host for ``float(t)``, or
copying an op's input from one device to another. The guard decides, per
direction, what happens to implicit ones:

``"allow"``     nothing is checked (the default);
``"log"``       an ``ImplicitTransferWarning`` once per call site, and the report counts each one;
``"disallow"``  ``ImplicitTransferError`` (host reads) or ``DeviceMismatchError``
                (op inputs on another device) is raised before the copy happens.

Python scalars and 0-d host tensors going into a device op are never counted:
frameworks treat them as numbers.

The state lives in a ContextVar (``devshim.settings.scoped_guard``), so a block
in one thread or asyncio task never changes what another sees. The hooks that
watch the frameworks live in each backend package's ``guard.py`` and are
installed only while some guard checks something; with none active nothing
is installed and nothing is paid.
"""

from __future__ import annotations

import os
import sys
from _thread import RLock

from devshim import settings, transfer
from devshim.errors import (
    DeviceMismatchError, ImplicitTransferError, ImplicitTransferWarning, InvalidGuardLevelError,
)

__all__ = [
    "transfer_guard", "TransferReport", "TransferEvent", "GuardState", "current",
    "implicit", "read_name", "direction_of", "ALLOW", "LOG", "DISALLOW", "DIRECTIONS", "KINDS",
]

ALLOW, LOG, DISALLOW = settings.GUARD_LEVELS
DIRECTIONS = ("device_to_host", "device_to_device", "host_to_device")
#: What the report counts: host reads, op inputs copied between devices, and host data sent to a device.
READ, OP_INPUT, TO_DEVICE = "device-to-host read", "cross-device op input", "host-to-device"
KINDS = (OP_INPUT, READ, TO_DEVICE)

_lock = RLock()
_active = 0  # guards (blocks, or the process default) that check something
_installed: set = set()  # backends whose guard.py hooks are in
_default = None  # the process default GuardState, from DEVSHIM_TRANSFER_GUARD
_default_active = False
_warned_sites: set = set()
_WARNED_LIMIT = 10_000


def _check_level(level, what: str) -> None:
    if level is not None and level not in settings.GUARD_LEVELS:
        raise InvalidGuardLevelError(
            f"Unknown transfer-guard level {level!r} for {what}. Valid levels: "
            f"{', '.join(repr(lv) for lv in settings.GUARD_LEVELS)}."
        )


class GuardState:
    """The levels in force for this thread or task, and the reports collecting events.

    ``checking`` is False when every direction is "allow": hooks return at once.
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
        return getattr(self, direction)

    def __repr__(self) -> str:
        return (f"GuardState(device_to_host={self.device_to_host!r}, device_to_device="
                f"{self.device_to_device!r}, host_to_device={self.host_to_device!r})")


def _default_state() -> GuardState:
    global _default
    state = _default
    if state is None:
        level = settings.default_guard_level()
        state = _default = GuardState(level, level, level)
    return state


def current() -> GuardState:
    """The guard state of this thread or asyncio task.

    Example:
        >>> with ds.transfer_guard("log"):
        ...     devshim.guard.current().device_to_host
        'log'
    """
    state = settings.scoped_guard.get()
    return state if state is not None else _default_state()


# ------------------------------------------------------------------ reports


class TransferEvent:
    """One implicit transfer: its ``kind`` (one of ``KINDS``), ``direction``, ``what``
    did it (``"float(t)"``, an op's name), ``source`` and ``target`` devices, the
    ``site`` ("file:line" in the code that made it) and what the guard did
    (``"logged"`` or ``"refused"``).

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
    """What a ``transfer_guard`` block saw: every implicit transfer, counted by kind and call site.

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
        #: Explicit copies between devices made by ``ds.convert(..., device=)`` (``action`` "explicit").
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
        """kind -> how many, for each of ``KINDS`` (zeros included).

        Example:
            >>> report.counts
            {'cross-device op input': 0, 'device-to-host read': 1, 'host-to-device': 0}
        """
        found = dict.fromkeys(KINDS, 0)
        for event in self.events:
            found[event.kind] += 1
        return found

    @property
    def sites(self) -> dict:
        """(kind, what, source, target, site) -> how many times, in the order first seen.

        Example:
            >>> report.sites
            {('device-to-host read', 'float(t)', 'gpu:0', 'cpu:0', 'train.py:31'): 1}
        """
        found: dict = {}
        for e in self.events:
            key = (e.kind, e.what, str(e.source), str(e.target), e.site)
            found[key] = found.get(key, 0) + 1
        return found

    def __len__(self) -> int:
        return len(self.events)

    def __str__(self) -> str:
        levels = ", ".join(f"{d}={lv}" for d, lv in self.levels.items())
        head = f"{self.total} implicit transfer{'s' if self.total != 1 else ''} ({levels})"
        lines = [head]
        for (kind, what, source, target, site), count in self.sites.items():
            lines.append(f"  {kind:<22} {count:>4}  {what} {source} -> {target} at {site}")
        if self.explicit:
            lines.append(f"  and {len(self.explicit)} explicit conversion{'s' if len(self.explicit) != 1 else ''} "
                         f"between devices (report.explicit)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<TransferReport {self.total} implicit transfers {self.counts}>"


# ------------------------------------------------------------------ the block


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
        _check_level(level, "the guard")
        given = {"device_to_host": device_to_host, "device_to_device": device_to_device,
                 "host_to_device": host_to_device}
        for direction, value in given.items():
            _check_level(value, direction)
            if value is None:
                given[direction] = level
        self._given = given
        self._stack: list = []

    def __enter__(self) -> TransferReport:
        outer = current()
        levels = [self._given[d] or outer.level(d) for d in DIRECTIONS]
        probe = GuardState(*levels)
        report = TransferReport(probe)
        state = GuardState(*levels, reports=outer.reports + (report,))
        token = settings.scoped_guard.set(state)
        checking = state.checking
        if checking:
            _activate()
            _enter_thread()
        self._stack.append((token, checking, _enter_block(state)))
        return report

    def __exit__(self, *exc) -> None:
        token, checking, entered = self._stack.pop()
        for module in reversed(entered):
            module.exit_block()
        settings.scoped_guard.reset(token)
        if checking:
            _exit_thread()
            _deactivate()


# ------------------------------------------------------------------ what hooks call


def implicit(direction: str, kind: str, what: str, source, target, state: GuardState = None,
             error: Exception = None) -> None:
    """Report an implicit transfer about to happen; raise if the level refuses it.

    Backends' ``guard.py`` hooks call this (after checking ``state.checking``
    and that the tensor really moves). It does nothing for explicit transfers
    (``devshim.transfer.is_explicit()``) or where the direction's level is "allow".

    Example:
        >>> implicit("device_to_host", READ, "float(t)", gpu0, cpu0)
    """
    if state is None:
        state = current()
    level = getattr(state, direction)
    if level == ALLOW or transfer.is_explicit():
        return
    site = _user_site()
    action = "refused" if level == DISALLOW else "logged"
    event = TransferEvent(kind, direction, what, source, target, site, action)
    for report in state.reports:
        report.events.append(event)
    if level == LOG:
        _warn_once(event)
        return
    raise error if error is not None else _error(event)


def _conversion(direction: str, what: str, source, target, explicit: bool, error) -> None:
    """What ``devshim.transfer.crossing`` calls: ``ds.convert`` copying between devices."""
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


transfer.set_reporter(_conversion)


def read_name(readers: dict, fallback: str, depth: int = 6) -> str:
    """How a host read looks in the user's code, from the framework's frames above the hook.

    ``readers`` maps the framework's method names (``"__float__"``) to what the
    user wrote (``"float(t)"``); the outermost one found within ``depth`` frames
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
        name = readers.get(frame.f_code.co_name)
        if name is not None:
            found = name
        frame = frame.f_back
    return found or fallback


def direction_of(source, target) -> tuple:
    """(direction, kind) of an op input moving from ``source`` to ``target`` (two ``ds.Device``s).

    Between two host devices (MXNet's ``cpu(0)`` and ``cpu(1)``) it is a copy between
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
    with _lock:
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


_skipped_roots = None


def _skipped() -> tuple:
    """Folders whose frames are not "user code": devshim's and the loaded frameworks'."""
    global _skipped_roots
    if _skipped_roots is None:
        roots = [os.path.dirname(os.path.abspath(__file__))]
        from devshim.backends import specs

        for spec in specs().values():
            module = sys.modules.get(spec.import_name)
            path = getattr(module, "__file__", None)
            if path:
                roots.append(os.path.dirname(os.path.abspath(path)))
        _skipped_roots = tuple(root + os.sep for root in roots)
    return _skipped_roots


def _user_site() -> str:
    roots = _skipped()
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith("<") and not os.path.abspath(filename).startswith(roots):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>:0"


# ------------------------------------------------------------------ hooks in and out


def _guard_modules() -> list:
    """(name, guard module) for every backend in use that has one: its framework is imported,
    or devshim has made its adapter (which imports the framework on first use)."""
    from devshim.backends import _instances, specs

    found = []
    for name, spec in specs().items():
        if (spec.is_loaded() or name in _instances) and spec.has_module("guard"):
            found.append((name, spec.module("guard")))
    return found


def _activate() -> None:
    global _active, _skipped_roots
    with _lock:
        _active += 1
        if _active == 1:
            transfer.watch()
        _skipped_roots = None  # frameworks may have been imported since
        for name, module in _guard_modules():
            if name not in _installed:
                _install(name, module)


def _install(name: str, module) -> None:
    # Marked first: a backend's install() may load its own backend (TensorFlow asks for its
    # adapter), and the registry then calls backend_loaded() for it; a second install would
    # wrap the wrappers, and the wrapper would stay after uninstall().
    _installed.add(name)
    try:
        module.install()
    except BaseException:
        _installed.discard(name)
        raise


def _deactivate() -> None:
    global _active
    with _lock:
        _active -= 1
        if _active == 0:
            transfer.unwatch()
            for name, module in _guard_modules():
                if name in _installed:
                    module.uninstall()
                    _installed.discard(name)


def _enter_thread() -> None:
    for name, module in _guard_modules():
        enter = getattr(module, "enter_thread", None)
        if enter is not None and name in _installed:
            enter()


def _enter_block(state) -> list:
    """Tell the installed guards that want every block (JAX maps levels onto its own guard)."""
    if not _installed:
        return []
    entered = []
    for name, module in _guard_modules():
        enter = getattr(module, "enter_block", None)
        if enter is not None and name in _installed:
            enter(state)
            entered.append(module)
    return entered


def _exit_thread() -> None:
    for name, module in _guard_modules():
        leave = getattr(module, "exit_thread", None)
        if leave is not None and name in _installed:
            leave()


def backend_loaded(name: str) -> None:
    """Called by the registry when a backend's adapter is made: installs its hooks if
    a guard is active, and starts the process default from DEVSHIM_TRANSFER_GUARD."""
    global _default_active
    try:
        default = _default_state()
    except InvalidGuardLevelError:
        default = None  # reported where the level is used, not while loading a backend
    with _lock:
        if default is not None and default.checking and not _default_active:
            _default_active = True
            _activate()
            return
        if _active and name not in _installed:
            # Installed even when the framework is not imported yet: the adapter is made because
            # devshim is about to use it (ds.try_gpu() imports torch after making the adapter),
            # and tensors made after that must be guarded too.
            spec_module = dict(_guard_modules()).get(name)
            if spec_module is not None:
                _install(name, spec_module)


def _settings_changed() -> None:
    global _default, _default_active
    with _lock:
        _default = None
        try:
            checking = _default_state().checking
        except InvalidGuardLevelError:
            checking = False  # reported where the level is used
        if checking and not _default_active:
            _default_active = True
            _activate()
        elif not checking and _default_active:
            _default_active = False
            _deactivate()


settings.on_change(_settings_changed)

"""When the backends' guard hooks go in and out.

The registry tells this module about every backend (`declare`: its name, its
framework's module name, and how to load its `GuardHooks`) and about each
adapter it makes (`backend_loaded`). Hooks are installed only while some guard
checks something (a block, or the process default from `DEVSHIM_TRANSFER_GUARD`),
and only for backends in use: their framework is imported, or devshim has made
their adapter (which imports the framework on first use). With no guard checking,
nothing is installed and nothing is paid.

This module imports no registry: the registry calls down into it.

Example:
    >>> from devshim.guard import lifecycle
    >>> lifecycle.installed()
    ()
"""

from __future__ import annotations

import os
import sys
from devshim import _lazy, settings
from devshim.errors import InvalidGuardLevelError
from devshim.guard import marker, state

__all__ = [
    "declare", "backend_loaded", "activate", "deactivate", "enter_thread", "exit_thread",
    "enter_block", "exit_block", "translate", "installed", "framework_files",
]

_lock = _lazy.LOCK  # devshim's one loading lock: the registry calls in here holding it
_declared: dict = {}  # backend name -> (framework module name, loader returning GuardHooks or None)
_made: set = set()  # backends whose adapter devshim made
_hooks: dict = {}  # backend name -> its GuardHooks, once loaded (None: the backend has none)
_installed: dict = {}  # backend name -> its installed GuardHooks, in install order
_active = 0  # guards (blocks, or the process default) that check something
_default_active = False


def declare(backends: dict) -> None:
    """Make the registry's backends known, replacing those declared before: `backends`
    maps a name to `(framework module name, load)`, where `load()` returns the
    backend's `GuardHooks`, or None when it has no guard.py.

    Example:
        >>> declare({"torch": ("torch", lambda: TorchGuardHooks())})
    """
    with _lock:
        _declared.clear()
        _declared.update(backends)
        _hooks.clear()
    settings.on_change(_settings_changed)  # once: on_change keeps one of each


def _hooks_of(name: str):
    if name not in _hooks:
        hooks = _installed.get(name)  # keep the instance whose hooks are in
        _hooks[name] = hooks if hooks is not None else _declared[name][1]()
    return _hooks[name]


def _in_use() -> list:
    """(name, hooks) for every declared backend in use that has hooks."""
    found = []
    for name, (import_name, _) in list(_declared.items()):
        if name in _made or import_name in sys.modules:
            hooks = _hooks_of(name)
            if hooks is not None:
                found.append((name, hooks))
    return found


def installed() -> tuple:
    """Names of the backends whose hooks are in.

    Example:
        >>> with ds.transfer_guard("disallow"):
        ...     lifecycle.installed()
        ('torch',)
    """
    return tuple(_installed)


# Libraries that run on a framework and call it on their user's behalf (Keras 3 copies a batch to
# its device inside its own convert_to_tensor): their frames are not the user's code either.
_LIBRARIES_ABOVE = ("keras",)


def framework_files() -> tuple:
    """The folders of the frameworks in use: frames there are not the user's code.

    Example:
        >>> framework_files()
        ('/usr/lib/python3/site-packages/torch',)
    """
    import_names = [name for name, _ in list(_declared.values())] + list(_LIBRARIES_ABOVE)
    paths = [getattr(sys.modules.get(import_name), "__file__", None) for import_name in import_names]
    return tuple(os.path.dirname(os.path.abspath(path)) for path in paths if path)


def _install(name: str, hooks) -> None:
    # Marked first: a backend's install() may make its own adapter (TensorFlow asks for it),
    # and the registry then calls backend_loaded() for it; a second install would wrap the
    # wrappers, and the outer wrapper would stay after uninstall().
    _installed[name] = hooks
    try:
        hooks.install()
    except BaseException:
        _installed.pop(name, None)
        raise


def activate() -> None:
    """One more guard checks something: install the hooks of every backend in use.

    Example:
        >>> activate(); deactivate()
    """
    global _active
    with _lock:
        _active += 1
        if _active == 1:
            marker.watch()
        for name, hooks in _in_use():
            if name not in _installed:
                _install(name, hooks)


def deactivate() -> None:
    """One guard fewer checks something: the last one takes every hook out.

    Example:
        >>> activate(); deactivate()
    """
    global _active
    with _lock:
        _active -= 1
        if _active == 0:
            marker.unwatch()
            for name in reversed(list(_installed)):
                _installed.pop(name).uninstall()


def enter_thread() -> None:
    """A checking block starts in this thread.

    Example:
        >>> enter_thread(); exit_thread()
    """
    for hooks in list(_installed.values()):
        hooks.enter_thread()


def exit_thread() -> None:
    """A checking block ends in this thread.

    Example:
        >>> enter_thread(); exit_thread()
    """
    for hooks in reversed(list(_installed.values())):
        hooks.exit_thread()


def enter_block(block_state) -> list:
    """Tell the installed hooks that follow every block; returns them, for `exit_block`.

    Example:
        >>> entered = enter_block(state.current()); exit_block(entered)
    """
    entered = [hooks for hooks in list(_installed.values()) if hooks.follows_blocks()]
    for hooks in entered:
        hooks.enter_block(block_state)
    return entered


def exit_block(entered: list) -> None:
    """End what `enter_block` started, innermost first.

    Example:
        >>> exit_block(entered)
    """
    for hooks in reversed(entered):
        hooks.exit_block()


def translate(entered: list, error: BaseException):
    """devshim's error for `error` leaving a block, from the hooks `enter_block` entered
    (a framework's own guard refusing a transfer); None when none of them claims it.

    Example:
        >>> translate(entered, KeyError("x")) is None
        True
    """
    for hooks in reversed(entered):
        found = hooks.translate(error)
        if found is not None:
            return found
    return None


def backend_loaded(name: str) -> None:
    """The registry made `name`'s adapter: install its hooks if a guard is checking, and
    start the process default from `DEVSHIM_TRANSFER_GUARD`; `InvalidGuardLevelError`
    (with the accepted values) when that variable holds no level.

    Example:
        >>> backend_loaded("torch")
    """
    global _default_active
    # A bad DEVSHIM_TRANSFER_GUARD fails here, at first use of devshim, rather than leaving the
    # whole run unguarded without a word (the registry keeps no adapter, so every use fails).
    default = state.default()
    with _lock:
        _made.add(name)
        if default is not None and default.checking and not _default_active:
            _default_active = True
            activate()
            return
        if _active and name not in _installed and name in _declared:
            # Installed even when the framework is not imported yet: the adapter is made because
            # devshim is about to use it (ds.try_gpu() imports torch after making the adapter),
            # and tensors made after that must be guarded too.
            hooks = _hooks_of(name)
            if hooks is not None:
                _install(name, hooks)


def _settings_changed() -> None:
    global _default_active
    error = None
    with _lock:
        state.forget_default()
        try:
            checking = state.default().checking
        except InvalidGuardLevelError as err:
            checking, error = False, err  # raised from reload(), after the hooks are settled
        if checking and not _default_active:
            _default_active = True
            activate()
        elif not checking and _default_active:
            _default_active = False
            deactivate()
    if error is not None and _made:
        raise error

"""Which backend functions without a tensor use.

In order of precedence: the innermost `use_backend` block of the current
thread or asyncio task (a ContextVar in `devshim.settings`), then
`set_backend`, then `DEVSHIM_BACKEND`, then the installed backend with the
lowest `auto_rank`.

Example:
    >>> from devshim.backends import selection
    >>> selection.get_backend().name
    'torch'
"""

from __future__ import annotations

from devshim import _lazy, settings
from devshim.backends.base import Backend
from devshim.backends.registry import instance, load_backend, specs
from devshim.errors import BackendError

__all__ = ["get_backend", "set_backend", "use_backend", "reset_backend", "selection_reason", "select_default"]

_lock = _lazy.LOCK  # devshim's one loading lock (see devshim._lazy)
_global = None
_global_reason = ""
_global_from_env = False


def select_default() -> tuple:
    """(adapter, why) for the backend chosen without `set_backend`: `DEVSHIM_BACKEND`,
    else the first installed in auto-selection order.

    Example:
        >>> selection.select_default()[1]
        'auto: torch is the first installed of torch, tensorflow, jax, mxnet, cupy, numpy'
    """
    requested = settings.requested_backend()
    if requested is not None:
        return load_backend(requested), f"{settings.BACKEND_VAR}={requested}"
    ranked = [spec for spec in specs().values() if spec.auto_rank is not None]
    names = ", ".join(spec.name for spec in ranked)
    for spec in ranked:
        if spec.is_installed():
            return instance(spec.name), f"auto: {spec.name} is the first installed of {names}"
    raise BackendError(
        f"No backend is installed (devshim looks for {names}). Install one, e.g. "
        f'pip install torch, or pip install "devshim[torch]" where devshim is installed.'
    )


def get_backend(name=None) -> Backend:
    """The adapter functions without a tensor use (or the one named).

    Example:
        >>> ds.get_backend().name
        'torch'
    """
    if name is not None:
        return load_backend(name)
    scoped = settings.scoped_backend.get()
    if scoped is not None:
        return scoped
    adapter = _global
    if adapter is None:
        adapter = _choose()
    return adapter


def _choose() -> Backend:
    global _global, _global_reason, _global_from_env
    with _lock:
        settings.on_change(_settings_changed)  # once: on_change keeps one of each
        if _global is None:
            adapter, reason = select_default()
            _global_reason, _global_from_env = reason, True
            _global = adapter
        return _global


def set_backend(name: str) -> Backend:
    """Select the backend for the whole process (`use_backend` blocks still win).

    Example:
        >>> ds.set_backend("numpy").name
        'numpy'
    """
    adapter = load_backend(name)
    global _global, _global_reason, _global_from_env
    with _lock:
        settings.on_change(_settings_changed)  # once: on_change keeps one of each
        _global, _global_reason, _global_from_env = adapter, f"set_backend({name!r})", False
    return adapter


def reset_backend() -> None:
    """Forget the process-wide selection, `set_backend`'s included; the next use chooses again.

    Example:
        >>> ds.backends.reset_backend()
    """
    global _global, _global_reason, _global_from_env
    with _lock:
        _global, _global_reason, _global_from_env = None, "", False


class use_backend:
    """Select a backend inside a `with` block, for this thread or asyncio task only.

    The backend is loaded (and checked) when the object is made; entering the
    block selects it and yields the adapter, leaving restores the previous
    choice, also on exceptions. Blocks nest.

    Example:
        >>> with ds.use_backend("numpy") as bk:
        ...     ds.cpu()
        'cpu'
    """

    __slots__ = ("adapter", "_tokens")

    def __init__(self, name: str) -> None:
        self.adapter = load_backend(name)
        self._tokens: list = []

    def __enter__(self) -> Backend:
        self._tokens.append(settings.scoped_backend.set(self.adapter))
        return self.adapter

    def __exit__(self, *exc) -> None:
        settings.scoped_backend.reset(self._tokens.pop())


def selection_reason() -> str:
    """Why the current backend was chosen, for `devshim info`.

    Example:
        >>> ds.backends.selection_reason()
        'DEVSHIM_BACKEND=torch'
    """
    scoped = settings.scoped_backend.get()
    if scoped is not None:
        return f"use_backend({scoped.name!r})"
    get_backend()
    return _global_reason


def _settings_changed() -> None:
    global _global, _global_reason, _global_from_env
    with _lock:
        if _global_from_env:
            _global, _global_reason, _global_from_env = None, "", False

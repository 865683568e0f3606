"""Which backend functions without a tensor use.

In order of precedence: the innermost `use_backend` block of the current
thread or asyncio task (a ContextVar in `devshim.settings`), then
`set_backend`, then `DEVSHIM_BACKEND`, then the framework Keras 3 runs on when
Keras is imported (`KERAS_BACKEND`; without it, only where the first installed
backend's framework is not in use, as importing TensorFlow imports Keras), then
the installed backend with the lowest `auto_rank`. A `DEVSHIM_BACKEND` that names another framework than the
`KERAS_BACKEND` Keras runs on is `KerasBackendMismatchError` (without
`KERAS_BACKEND`, Keras may be there only because TensorFlow imports it:
`DEVSHIM_BACKEND` wins); Keras imported after devshim chose is noticed at the
next call that needs the selected backend.

Example:
    >>> from devshim.backends import selection
    >>> selection.get_backend().name
    'torch'
"""

from __future__ import annotations

import sys

from devshim import _lazy, settings
from devshim.backends import keras_base
from devshim.backends.base import Backend
from devshim.backends.registry import canonical_name, instance, load_backend, model_placement, specs
from devshim.errors import BackendError, KerasBackendMismatchError

__all__ = ["get_backend", "set_backend", "use_backend", "reset_backend", "selection_reason", "select_default"]

_lock = _lazy.LOCK  # devshim's one loading lock (see devshim._lazy)
_global = None
_global_reason = ""
_global_from_env = False
_keras_unseen = False  # the choice was made before Keras was imported: look again once it is


def select_default() -> tuple:
    """(adapter, why) for the backend chosen without `set_backend`: `DEVSHIM_BACKEND` (a
    `KerasBackendMismatchError` where `KERAS_BACKEND` names another framework), else the
    framework Keras 3 runs on (once Keras is imported; with `KERAS_BACKEND` unset, only where
    the first installed framework is not in use: importing TensorFlow imports Keras), else the
    first installed in auto-selection order.

    Example:
        >>> selection.select_default()[1]
        'auto: torch is the first installed of torch, tensorflow, jax, mxnet, cupy, numpy'
    """
    requested = settings.requested_backend()
    follows = _keras_backend()
    if requested is not None:
        adapter = load_backend(requested)
        if follows is not None and follows != adapter.name and keras_base.chosen_backend() is not None:
            raise _mismatch(requested, follows)
        return _met_keras(adapter, follows if follows == adapter.name else None), f"{settings.BACKEND_VAR}={requested}"
    ranked = [spec for spec in specs().values() if spec.auto_rank is not None]
    names = ", ".join(spec.name for spec in ranked)
    first = next((spec for spec in ranked if spec.is_installed()), None)
    if follows is not None and (keras_base.chosen_backend() is not None or first is None or first.name == follows
                                or not first.is_loaded()):
        return _met_keras(load_backend(follows), follows), f"keras: Keras runs on {follows}"
    if first is not None:
        return instance(first.name), f"auto: {first.name} is the first installed of {names}"
    raise BackendError(
        f"No backend is installed (devshim looks for {names}). Install one, e.g. "
        f'pip install torch, or pip install "devshim[torch]" where devshim is installed.'
    )


def _keras_backend():
    """The devshim name of the framework Keras 3 runs on, when Keras is imported and it is one of
    devshim's backends; else None."""
    name = keras_base.backend()
    if name is None:
        return None
    try:
        return canonical_name(name)
    except BackendError:  # a Keras backend devshim has no backend for (OpenVINO)
        return None


def _met_keras(adapter: Backend, follows) -> Backend:
    """`adapter`, after telling its model placement that Keras runs on its framework."""
    if follows is not None:
        placement = model_placement(adapter.name)
        if placement is not None:
            placement.keras_imported(adapter)
    return adapter


def _mismatch(requested: str, follows: str) -> KerasBackendMismatchError:
    return KerasBackendMismatchError(
        f"{settings.BACKEND_VAR}={requested}, but Keras runs on {follows}: devshim's devices would be "
        f"{requested}'s, which Keras's models and keras.device cannot use. Set {settings.BACKEND_VAR}={follows} "
        f"(or unset it: devshim then follows Keras), or, to run Keras on {requested}, set "
        f"KERAS_BACKEND={requested} before Keras is imported."
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
    if adapter is None or (_keras_unseen and "keras" in sys.modules):
        adapter = _choose()
    return adapter


def _choose() -> Backend:
    global _global, _global_reason, _global_from_env, _keras_unseen
    with _lock:
        settings.on_change(_settings_changed)  # once: on_change keeps one of each
        if _global is None or (_keras_unseen and _global_from_env):
            _global, _keras_unseen = None, False
            adapter, reason = select_default()
            _global_reason, _global_from_env = reason, True
            # Until Keras is imported (and done importing), each call looks whether it has been.
            _global, _keras_unseen = adapter, keras_base.backend() is None and _keras_installed()
        return _global


def _keras_installed() -> bool:
    """Whether Keras could be imported later (then each call looks whether it has been, until it is)."""
    import importlib.util

    return importlib.util.find_spec("keras") is not None


def set_backend(name: str) -> Backend:
    """Select the backend for the whole process (`use_backend` blocks still win).

    Example:
        >>> ds.set_backend("numpy").name
        'numpy'
    """
    adapter = load_backend(name)
    global _global, _global_reason, _global_from_env, _keras_unseen
    with _lock:
        settings.on_change(_settings_changed)  # once: on_change keeps one of each
        _global, _global_reason, _global_from_env, _keras_unseen = adapter, f"set_backend({name!r})", False, False
    return adapter


def reset_backend() -> None:
    """Forget the process-wide selection, `set_backend`'s included; the next use chooses again.

    Example:
        >>> ds.backends.reset_backend()
    """
    global _global, _global_reason, _global_from_env, _keras_unseen
    with _lock:
        _global, _global_reason, _global_from_env, _keras_unseen = None, "", False, False


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
    with _lock:  # (an RLock: reset_backend takes it again)
        if _global_from_env:
            reset_backend()

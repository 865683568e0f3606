"""The contract a backend's `guard.py` implements: `GuardHooks`.

A backend package that can watch its framework for implicit transfers has a
`guard.py` defining exactly one subclass of `GuardHooks` (the registry finds
it, as it finds the `Backend` subclass in `core.py`). The guard's lifecycle
(`devshim.guard.lifecycle`) makes one instance per backend and calls it:

`install()` / `uninstall()`     process-wide hooks in and out: when the first
                                    guard starts checking something, and when the last stops;
`enter_thread()` / `exit_thread()`  per-thread parts (torch's function mode), around
                                    each checking block in the thread that enters it;
`enter_block(state)` / `exit_block()`  every block, checking or not, for backends that
                                    map devshim's levels onto the framework's own guard (JAX);
`translate(error)`                 an exception leaving such a block: the framework guard's
                                    refusal, as devshim's error (or None to leave it as it is).

Hooks replace framework functions with `self.patch(owner, name, wrapper)`, which
remembers what `owner` had there; the base class's `uninstall()` puts every one back
(`restore()`), so a backend's hooks write only what they wrap. A wrapper is marked with
`mark_wrapper` so others (the virtual torch device's own reading methods, tests) can tell
a wrapper and reach the original. Hooks report what they see with
`devshim.guard.report.implicit`, after checking `state.checking` and
`marker.is_explicit()`.

Example:
    >>> class Hooks(GuardHooks):
    ...     def install(self):
    ...         if not self.patched():
    ...             self.patch(Array, "__float__", mark_wrapper(guarded_float, Array.__float__))
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from devshim.errors import DeviceMismatchError, DevshimError

__all__ = ["GuardHooks", "mark_wrapper", "original_of", "is_wrapper", "tensors_in", "mixed_devices_refused"]

_ORIGINAL = "__devshim_guard_original__"
_ABSENT = object()  # what an owner had where a patch went: nothing of its own


class GuardHooks(ABC):
    """One backend's transfer-guard hooks (the class a backend's `guard.py` defines).

    What `patch` replaced is kept per class, not per instance (so the patching methods are
    class methods): the registry may make several instances of one backend's hooks, and the
    framework has one set of functions.

    Example:
        >>> hooks = ds.backends.guard_hooks("torch")
        >>> hooks.install(); hooks.uninstall()
    """

    #: (owner, name) -> what the owner itself had there before the patch (`_ABSENT`: nothing,
    #: the attribute was inherited), in patch order. Each subclass has its own.
    _saved: dict = {}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls._saved = {}

    @abstractmethod
    def install(self) -> None:
        """Put the process-wide hooks in (called once while any guard checks something)."""

    def uninstall(self) -> None:
        """Take them out again, leaving the framework exactly as it was (`restore()`)."""
        self.restore()

    @classmethod
    def patch(cls, owner, name: str, replacement) -> None:
        """Put `replacement` at `owner.name` (a class or a module), remembering what
        `owner` itself had there, to put back on `restore()`.

        Example:
            >>> hooks.patch(torch.Tensor, "item", mark_wrapper(guarded_item, torch.Tensor.item))
        """
        cls._saved.setdefault((owner, name), vars(owner).get(name, _ABSENT))
        setattr(owner, name, replacement)

    @classmethod
    def patched(cls, owner=None, name=None) -> bool:
        """Whether anything is patched now (or, given `owner` and `name`, that attribute).

        Example:
            >>> hooks.patched(torch.Tensor, "item")
            False
        """
        return bool(cls._saved) if owner is None else (owner, name) in cls._saved

    @classmethod
    def patches(cls) -> list:
        """`(owner, name)` of each attribute patched now, in patch order.

        Example:
            >>> hooks.install(); hooks.patches()
            [(<class 'torch.Tensor'>, 'item'), (<class 'torch.Tensor'>, 'tolist')]
        """
        return list(cls._saved)

    @classmethod
    def original(cls, owner, name: str):
        """What `owner` itself had at `name` before `patch` replaced it (None if nothing).

        Example:
            >>> hooks.original(ArrayImpl, "_value").fget
            <function ArrayImpl._value at 0x...>
        """
        found = cls._saved.get((owner, name), _ABSENT)
        return None if found is _ABSENT else found

    @classmethod
    def restore(cls) -> None:
        """Put back everything `patch` replaced, the last patched first.

        Example:
            >>> hooks.restore(); hooks.patched()
            False
        """
        for (owner, name), own in reversed(list(cls._saved.items())):
            if own is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, own)
            del cls._saved[owner, name]

    def enter_thread(self) -> None:
        """A checking block starts in this thread (per-thread hooks, such as torch's mode)."""

    def exit_thread(self) -> None:
        """That block ends."""

    def enter_block(self, state) -> None:
        """Any block starts in this thread, with `state` its `GuardState` (JAX's own guard)."""

    def exit_block(self) -> None:
        """That block ends."""

    def translate(self, error: BaseException):
        """devshim's error for `error`, an exception leaving a block this backend follows,
        when it is the framework's own guard refusing a transfer; None leaves it as it is.

        Example:
            >>> GuardHooks.translate(hooks, KeyError("x")) is None
            True
        """
        return None

    @classmethod
    def follows_blocks(cls) -> bool:
        """Whether the hooks want every block (they override `enter_block`).

        Example:
            >>> GuardHooks.follows_blocks()
            False
        """
        return cls.enter_block is not GuardHooks.enter_block


def mark_wrapper(wrapper, original):
    """Record that `wrapper` is the guard's replacement for `original`; returns `wrapper`.

    Example:
        >>> reader = mark_wrapper(guarded_float, torch.Tensor.__float__)
    """
    setattr(wrapper, _ORIGINAL, original)
    return wrapper


def original_of(fn):
    """The framework's own function behind a guard wrapper, or `fn` itself.

    Example:
        >>> original_of(torch.Tensor.__float__)   # inside a checking block
        <slot wrapper '__float__' of 'torch._C.TensorBase' objects>
    """
    return getattr(fn, _ORIGINAL, fn)


def is_wrapper(fn) -> bool:
    """Whether `fn` is a guard wrapper made with `mark_wrapper`.

    Example:
        >>> is_wrapper(len)
        False
    """
    return hasattr(fn, _ORIGINAL)


def tensors_in(values, cls) -> list:
    """The instances of `cls` (a framework's tensor class) among `values`, an op's arguments,
    and in the lists and tuples among them, in order.

    Example:
        >>> tensors_in((x, [y, 2], "a"), torch.Tensor)
        [x, y]
    """
    found = []
    for value in values:
        if isinstance(value, cls):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(item for item in value if isinstance(item, cls))
    return found


def mixed_devices_refused(framework: str, error: BaseException, kinds, pattern, devices: str = ""):
    """devshim's `DeviceMismatchError` for `error` when it is `framework` refusing to
    combine tensors on different devices (an instance of `kinds` whose message matches the
    compiled `pattern`), with the framework's message first; None for anything else. What a
    backend's `translate` returns for those refusals; `devices` names them, where known.

    Example:
        >>> mixed_devices_refused("PyTorch", RuntimeError("Expected all tensors to be on the same device"),
        ...                       RuntimeError, re.compile("same device"))
        DeviceMismatchError('Expected all tensors to be on the same device (PyTorch refused ...)')
    """
    if not isinstance(error, kinds) or isinstance(error, DevshimError):
        return None
    message = str(error)
    if pattern.search(message) is None:
        return None
    return DeviceMismatchError(
        f"{message} ({framework} refused to combine tensors on different devices{devices}; inside "
        f"ds.transfer_guard this is devshim's error. Put them on one device explicitly first: "
        f"x = ds.copy_if_needed(x, ds.device_of(y)).)"
    )

"""Probes for the private framework names the backends use.

Frameworks move their internals (underscore names such as `torch._dynamo.exc`,
`keras.src...`, MXNet's `_LIB`) between releases without notice. Each backend
folder keeps the ones it uses in one module, `_internals.py`, each behind an
`Internal`: the dotted name, the feature that needs it, what that feature falls
back to without it, and the oldest release that has it. The rest of the backend asks
that module (`RESTART_ANALYSIS.get()`) and never names the internal itself.

A probe that finds its internal missing on a release at or past that oldest one (an
untested release moved it) issues one `FrameworkInternalWarning` per internal and
process, naming the feature that degrades and how, and answers None; the feature
then takes its fallback. On a release older than the internal, the probe answers
None quietly: the feature's own range and its named error cover that. The canary
tests (`tests/test_internals.py`) ask every probe of the backend under test, so the
newest-release CI envs fail the day a release moves one.

No framework is imported here: a probe's finder (in the backend's `_internals`)
imports it, and the framework's version is read from `sys.modules`.
"""

from __future__ import annotations

import importlib
import re
import sys
import threading
import warnings
from typing import Any, NamedTuple

from devshim.errors import FrameworkInternalWarning

__all__ = ["Internal", "Internals", "Slot", "release", "names_in_code", "dotted", "slot"]

_NOT_PROBED = object()
_FAILURES = (ImportError, AttributeError, TypeError, KeyError, RuntimeError)


def release(module_name: str):
    """The release of the imported framework `module_name` as a tuple of ints, or None
    when it is not imported or has no readable `__version__`.

    Example:
        >>> release("torch")          # torch 2.9.1+cu128 imported
        (2, 9, 1)
    """
    module = sys.modules.get(module_name)
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", str(getattr(module, "__version__", "")))
    if found is None:
        return None
    return tuple(int(part) for part in found.groups(default="0"))


class Slot(NamedTuple):
    """Where a framework keeps something devshim wraps: `owner.name` (a class or a module).
    What a probe finds for an internal that devshim replaces (`GuardHooks.patch(*slot, ...)`),
    so that the private name is spelt in `_internals` alone.

    Example:
        >>> slot = Slot(jax_array.ArrayImpl, "_value")
        >>> slot.own()                        # what the owner itself holds there
        <property object at 0x...>
    """

    owner: Any
    name: str

    def own(self):
        """What `owner` itself holds at `name` (a property, a staticmethod: not resolved).

        Example:
            >>> Slot(NDArray, "_advanced_index_to_array").own()
            <staticmethod(<function NDArray._advanced_index_to_array at 0x...>)>
        """
        return vars(self.owner)[self.name]

    def current(self):
        """`owner.name` as an attribute lookup gives it.

        Example:
            >>> Slot(pjit, "_get_fastpath_data").current()
            <function _get_fastpath_data at 0x...>
        """
        return getattr(self.owner, self.name)


def names_in_code(code) -> set:
    """The names a code object uses (attributes, globals) and its string constants, with those
    of the functions defined inside it: how a probe sees that a framework function still reads
    or sets a private name (`"_apply_primitive"`) without running it.

    Example:
        >>> "_torchdynamo_inline" in names_in_code(VariableBuilder._wrap.__code__)   # torch 2.4.1
        True
    """
    found = set(code.co_names) | {const for const in code.co_consts if isinstance(const, str)}
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            found |= names_in_code(const)
    return found


def dotted(*paths: str):
    """A finder for the objects at dotted `paths` ("torch._C._parse_to"): one object for one
    path, a tuple for several. Each path is followed by attribute, importing a module where a
    part is not yet an attribute; the finder imports only when the probe runs.

    Example:
        >>> dotted("torch._tensor_str._str")() is torch._tensor_str._str
        True
    """
    def find():
        found = []
        for path in paths:
            parts = path.split(".")
            value = importlib.import_module(parts[0])
            for i, part in enumerate(parts[1:], 2):
                value = getattr(value, part, None)
                if value is None:
                    value = importlib.import_module(".".join(parts[:i]))
            found.append(value)
        return found[0] if len(found) == 1 else tuple(found)

    return find


def slot(path: str):
    """A finder for the `Slot` at dotted `path` ("jax._src.pjit._get_fastpath_data"): its owner
    found as `dotted` finds it, the name checked to be there (AttributeError where it moved).

    Example:
        >>> slot("mxnet.ndarray.register._imperative_invoke")()
        Slot(owner=<module 'mxnet.ndarray.register' ...>, name='_imperative_invoke')
    """
    owner, _, name = path.rpartition(".")
    find_owner = dotted(owner)

    def find():
        found = find_owner()
        getattr(found, name)
        return Slot(found, name)

    return find


class Internal:
    """One private framework name a backend relies on, found by a probe.

    `name`      the dotted name ("torch._dynamo.exc.RestartAnalysis").
    `feature`   the devshim feature that uses it ("torch.compile: ...").
    `fallback`  what that feature does without it (said in the warning and the docs).
    `since`     the oldest release of the framework that has it (a tuple), or None for
                  every release devshim supports.
    `find`      a function that returns the object, raising ImportError, AttributeError
                  (or another lookup error) when it is missing.
    `before`    the first release that no longer needs it (a tuple), for a name devshim uses
                  only on older releases (a fallback for what a newer release offers another
                  way); None when every release from `since` on needs it.
    `framework` the import name whose releases `since` and `before` count, when not the
                  backend's framework ("keras" for Keras's internals in the tensorflow backend).

    Example:
        >>> RESTART = torch_internals.add("torch._dynamo.exc.RestartAnalysis", feature=...,
        ...                               fallback=..., find=_restart_analysis)
        >>> RESTART.get()
        <class 'torch._dynamo.exc.RestartAnalysis'>
    """

    __slots__ = ("owner", "framework", "name", "feature", "fallback", "since", "before", "_find", "_value",
                 "_lock")

    def __init__(self, owner: "Internals", name: str, *, feature: str, fallback: str, find, since=None,
                 before=None, framework=None):
        self.owner = owner
        self.framework = framework or owner.framework  # whose release `since` counts (keras for Keras's)
        self.name = name
        self.feature = feature
        self.fallback = fallback
        self.since = since
        self.before = before
        self._find = find
        self._value = _NOT_PROBED
        self._lock = threading.Lock()

    def get(self):
        """The internal, or None when this release lacks it (warning once when it should have it).

        Example:
            >>> RESTART.get() is None       # a torch that moved it: FrameworkInternalWarning, once
            True
        """
        value = self._value
        return value if value is not _NOT_PROBED else self._probe()

    def available(self) -> bool:
        """Whether this release has the internal (probing it, and warning, on first use).

        Example:
            >>> RESTART.available()
            True
        """
        return self.get() is not None

    def expected(self) -> bool:
        """Whether the imported release is one that should have it (`since` or later, and
        before `before`).

        Example:
            >>> ACC.expected()              # torch 2.9.1, ACC.since == (2, 13)
            False
        """
        found = release(self.framework)
        if found is None:
            return True
        new_enough = self.since is None or found >= tuple(self.since)
        return new_enough and (self.before is None or found < tuple(self.before))

    def reset(self) -> None:
        """Forget the probe's answer, so the next `get` looks again (tests).

        Example:
            >>> RESTART.reset()
        """
        self._value = _NOT_PROBED

    def _probe(self):
        with self._lock:
            if self._value is not _NOT_PROBED:
                return self._value
            try:
                value = self._find()
            except _FAILURES as err:
                value = None
                if self.expected():
                    warnings.warn(FrameworkInternalWarning(self._message(err)), stacklevel=4)
            self._value = value
            return value

    def _message(self, err: BaseException) -> str:
        framework = self.framework
        found = release(framework)
        spelled = f"{framework} {'.'.join(map(str, found))}" if found else framework
        return (
            f"{spelled} has no {self.name} ({type(err).__name__}: {err}), which devshim uses for "
            f"{self.feature}; devshim is tested on {self.owner.title} {self.owner.tested}. Until devshim "
            f"follows this release: {self.fallback}"
        )

    def __repr__(self) -> str:
        return f"Internal({self.name!r})"


class Internals:
    """The private names one backend uses, each behind an `Internal` probe.

    `framework` is the framework's import name ("torch"), `title` its name for people,
    `tested` the range of releases devshim's CI tests ("2.4 to 2.15").

    Example:
        >>> INTERNALS = Internals("torch", title="PyTorch", tested="2.4 to 2.15")
        >>> [internal.name for internal in INTERNALS]
        ['torch._C._get_privateuse1_backend_name', ...]
    """

    def __init__(self, framework: str, *, title: str, tested: str):
        self.framework = framework
        self.title = title
        self.tested = tested
        self._internals: list = []

    def add(self, name: str, *, feature: str, fallback: str, find, since=None, before=None,
            framework=None) -> Internal:
        """Declare one internal and return its probe.

        Example:
            >>> LIB = INTERNALS.add("mxnet.base._LIB", feature="ds.convert", fallback="...",
            ...                     find=lambda: mxnet.base._LIB)
        """
        internal = Internal(self, name, feature=feature, fallback=fallback, find=find, since=since,
                            before=before, framework=framework)
        self._internals.append(internal)
        return internal

    def __iter__(self):
        return iter(self._internals)

    def __len__(self) -> int:
        return len(self._internals)

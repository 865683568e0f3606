"""Dispatch on a tensor's type: which backend owns it, and that backend's fast paths.

`FAST_PATHS` maps each tensor class devshim has met to one `FastPaths` record: the
backend that owns its tensors and the function each public hot path calls for them
(`devshim/api.py` reads nothing else). Only backends whose framework is already in
`sys.modules` are asked who owns a value, so dispatch never imports a framework. A record
is learned once per class, under devshim's loading lock, and published whole: another
thread sees a class's record complete, or not at all.

Example:
    >>> from devshim.backends import dispatch
    >>> dispatch.fast_paths(torch.ones(1)).adapter.name
    'torch'
"""

from __future__ import annotations

import sys

from devshim import _lazy
from devshim.backends import keras_base, registry
from devshim.backends.base import trace_constant
from devshim.backends.probes import release
from devshim.errors import FirstCallInTraceError, TorchCompileReleaseError

__all__ = [
    "FastPaths", "FAST_PATHS", "fast_paths", "backend_for_tensor", "learn_type", "learn_class", "learn_types",
    "forget_types", "compile_entry_points", "compile_constants", "follow_torch_release",
]


class FastPaths:
    """What devshim knows about one tensor class: its backend, and a fast path per public function.

    `device_of(x)`: the framework's own device object (`ds.device_of`); `neutral_device(x)`:
    the `ds.Device` (`ds.neutral_device`); `copy(x, spec, non_blocking)`: a copy
    (`ds.to_device`); `copy_if_needed(x, spec)`: `x` or a copy (`ds.copy_if_needed`).
    The lookups that come before a call, where the backend keeps a `DeviceTable` (`table`):
    `native_is_attribute`, `x.device` is the answer of `ds.device_of` itself (torch, NumPy 2);
    `table[getattr(x, table.attr)]` is the `ds.Device`, `table.natives[...]` the native
    device; `exact` is the table when "already there" is an identity test in it (torch, NumPy),
    else None, with its `targets` (resolved spec -> Device) and `home` (NumPy's one Device)
    kept on the record too: `ds.copy_if_needed` reads them with one attribute load each.

    Example:
        >>> paths = dispatch.fast_paths(torch.ones(1))
        >>> paths.adapter.name, paths.native_is_attribute
        ('torch', True)
    """

    __slots__ = ("adapter", "table", "exact", "targets", "home", "native_is_attribute", "device_of",
                 "neutral_device", "copy", "copy_if_needed")

    def __init__(self, adapter) -> None:
        table = adapter.device_table()
        self.adapter = adapter
        self.table = table
        self.exact = table if table is not None and table.exact else None
        self.targets = self.exact.targets if self.exact is not None else None  # (the table's own dict)
        self.home = self.exact.home if self.exact is not None else None
        self.native_is_attribute = table is not None and table.attribute_is_native
        self.device_of = adapter.native_device_of_fn()
        self.neutral_device = adapter.neutral_device_fn()
        self.copy = adapter.copy_fn()
        self.copy_if_needed = adapter.copy_if_needed_fn()

    def __repr__(self) -> str:
        return f"<FastPaths of the {self.adapter.name} backend>"


#: Tensor class -> its `FastPaths`: the one table the public hot paths read.
FAST_PATHS: dict = {}
#: The classes whose record says `native_is_attribute` (torch, NumPy 2), as dict keys: an index
#: of FAST_PATHS, published with it, for `ds.device_of`'s first line (a membership test costs
#: about 8 ns less than reading the flag from the record, a tenth of the whole call on NumPy).
ANSWERED_BY_ATTRIBUTE: dict = {}
# Class -> None for classes known to hold no tensor (asked of the loaded backends once: a
# framework's tensor classes only exist once it is imported, so a negative answer never goes
# stale); class -> adapter for a class learned from one of its values (`learn_type`).
_owners: dict = {}
_keras_adapters: dict = {}  # a framework's adapter -> the adapter of Keras variables holding its tensors


def fast_paths(x):
    """The `FastPaths` of `type(x)`, learned on first sight; None for a value that is no
    tensor.

    The class is learned by `learn_class`, which torch.compile runs outside its trace: a
    compiled function meeting a tensor class for the first time still traces lookups only.

    Example:
        >>> dispatch.fast_paths(torch.ones(1)).device_of(torch.ones(1))
        device(type='cpu')
    """
    learned = learn_class(type(x))
    if learned is None:  # the class alone does not say (a TensorFlow or CuPy value): ask about x
        learned = learn_type(x) is not None
    return FAST_PATHS[type(x)] if learned else None


def backend_for_tensor(x):
    """The adapter owning tensor `x`, or None. Never imports a framework.

    Example:
        >>> ds.backends.backend_for_tensor(torch.ones(1)).name
        'torch'
    """
    kind = type(x)
    paths = FAST_PATHS.get(kind)
    if paths is not None:
        return paths.adapter
    try:
        return _owners[kind]
    except KeyError:
        pass
    owner = _keras_variables(x) if keras_base.is_variable_class(kind) else None
    if owner is None:
        for adapter in registry.loaded_adapters():
            if adapter.is_tensor(x):
                owner = adapter
                break
    _remember(kind, owner)
    return owner


def _keras_variables(x):
    """The adapter of a Keras 3 variable: its value's framework's, moving it through its value."""
    inner = backend_for_tensor(x.value)
    if inner is None:
        return None
    return _keras_adapters.setdefault(inner, keras_base.VariableAdapter(inner))


def learn_type(x):
    """Learn the fast paths of `type(x)`; returns its adapter, or None for non-tensors.

    Example:
        >>> ds.backends.learn_type(torch.ones(1)).name
        'torch'
    """
    adapter = backend_for_tensor(x)
    if adapter is not None:
        _learn(type(x), adapter)
    return adapter


@trace_constant
def learn_class(kind: type):
    """Learn the fast paths of tensors of class `kind` (`FAST_PATHS[kind]`) from the class
    alone: True for a tensor class, False for a class that is no tensor, None when the loaded
    backends cannot tell from the class (ask `learn_type` then).

    torch.compile runs this outside its trace (`trace_constant`): the registry is built,
    adapters made and records learned (locks and imports) in plain Python. When that happens
    inside a trace, the trace has already read `FAST_PATHS` without the class, so the torch
    adapter starts it over (`restart_trace`) and the second pass traces lookups only: a
    function whose devshim call is the process's first still compiles with `fullgraph=True`.

    Example:
        >>> dispatch.learn_class(torch.Tensor), dispatch.FAST_PATHS[torch.Tensor].adapter.name
        (True, 'torch')
    """
    if kind in FAST_PATHS:
        return True
    if kind in _owners and _owners[kind] is None:
        return False
    if keras_base.is_variable_class(kind):
        return None  # its framework is its value's: learn_type asks about the value
    unsure = False
    for adapter in list(registry.loaded_adapters()):  # made here, not in a trace
        owns = adapter.is_tensor_type(kind)
        if owns:
            _learn(kind, adapter)  # (the torch adapter learns its own classes when it is made)
            if _tracing():
                _restart_trace(kind)
            return True
        unsure = unsure or owns is None
    if unsure and kind.__module__.partition(".")[0] != "devshim":
        return None
    # (a class of devshim's own that no backend claims, a ds.Device leaf in a batch, holds no
    # tensor: said here, where a backend that cannot tell from the class, JAX's or TensorFlow's,
    # would leave it to learn_type, whose lock a torch.compile trace cannot enter)
    _remember(kind, None)
    return False


def learn_types(adapter, kinds) -> None:
    """Learn the fast paths of the tensor classes `kinds`, owned by `adapter`, before any
    tensor is met (the torch adapter does, for `torch.Tensor` and `torch.nn.Parameter`, when
    it is made): torch.compile then traces devshim's hot paths as lookups only, also on the first
    call.

    Example:
        >>> dispatch.learn_types(ds.get_backend("torch"), (torch.Tensor, torch.nn.Parameter))
    """
    for kind in kinds:
        _learn(kind, adapter)


def forget_types() -> None:
    """Forget every class's owner and fast paths (after backends are registered or removed).

    Example:
        >>> dispatch.forget_types()
    """
    with _lazy.LOCK:
        ANSWERED_BY_ATTRIBUTE.clear()
        FAST_PATHS.clear()
        _owners.clear()
        _keras_adapters.clear()


def _learn(kind: type, adapter) -> None:
    """Make `kind`'s record, once, and publish it whole."""
    if kind in FAST_PATHS:
        return
    with _lazy.LOCK:
        if kind not in FAST_PATHS:
            registry.on_table_change(forget_types)  # (kept once)
            paths = FastPaths(adapter)
            _owners[kind] = adapter
            FAST_PATHS[kind] = paths
            if paths.native_is_attribute:
                ANSWERED_BY_ATTRIBUTE[kind] = True


def _remember(kind: type, owner) -> None:
    with _lazy.LOCK:
        registry.on_table_change(forget_types)  # (kept once)
        _owners.setdefault(kind, owner)


def _tracing() -> bool:
    """Whether torch.compile is tracing now (`learn_class` runs outside its trace, during it)."""
    torch = sys.modules.get("torch")
    compiler = getattr(torch, "compiler", None)
    return compiler is not None and compiler.is_compiling()


def _restart_trace(kind: type):
    for tracer in registry.loaded_adapters():
        tracer.restart_trace()  # torch's Dynamo starts over and reads the records learned
    raise FirstCallInTraceError(
        f"devshim met {kind.__module__}.{kind.__qualname__} for the first time inside "
        f"torch.compile, whose trace cannot follow the tables devshim fills then. Call any "
        f"devshim function once before compiling (ds.try_gpu(), or ds.device_of(x) on such "
        f"a tensor); its tables are filled now, so calling the compiled function again works."
    )


# ------------------------------------------------------------------ inside torch.compile

#: The first torch whose Dynamo traces devshim's own dispatch (docs/supported-versions.md). On an
#: older one Dynamo traces the torch backend's traced path in its place (its `_traced` module).
COMPILE_SUPPORT = (2, 13)
_entry_points: list = []  # devshim's public functions that take tensors, as devshim.api registers them
_marked: set = set()  # those that carry devshim's stand-in for Dynamo now


def compile_entry_points(*functions) -> None:
    """Register devshim's public functions that take tensors (`devshim.api` does): on a torch
    older than 2.13, torch.compile traces the torch backend's traced version of each in its
    place, and refuses by name (`TorchCompileReleaseError`) one that has none.

    Example:
        >>> dispatch.compile_entry_points(device_of, to_device)
    """
    _entry_points.extend(functions)
    follow_torch_release()


def compile_constants(*functions) -> None:
    """Register devshim's public functions that take no tensor (`ds.try_gpu`, `ds.device`...;
    `devshim.api` does): on every torch, torch.compile runs them in plain Python and keeps what
    they return (a device, a count), as it keeps a device spec's resolution. Dynamo traces a
    stand-in in their place (`follow_torch_release` says how); plain calls never see it.

    Example:
        >>> dispatch.compile_constants(try_gpu)
        >>> torch.compile(lambda x: x.to(ds.try_gpu()), fullgraph=True)(torch.ones(1))
        tensor([1.])
    """
    attribute = _dynamo_inline_attribute()
    for function in functions:
        setattr(function, attribute, _constant_stand_in(function))


def follow_torch_release() -> None:
    """Mark the registered functions for Dynamo unless the imported torch is 2.13 or later (the
    torch adapter asks again when it is made: torch may be imported after `devshim.api`).

    Dynamo traces a function's `_torchdynamo_inline` in its place (what `torch.jit` and
    `torch.compile` wrappers set; torch 2.4 to 2.15 read it). devshim sets it to the torch
    backend's traced version of the function (its `_traced` module: plain Python over torch
    tensors, module functions without a closure, which torch 2.4's Dynamo would guard through
    the public function's own), or, for a function without
    one, to a stand-in that asks `_refuse_compile`, which Dynamo runs in plain Python
    (`trace_constant`) and which raises `TorchCompileReleaseError`. On a torch 2.13 or later
    (met there only when torch was imported after devshim.api) either takes the marks off first,
    and the traced version has Dynamo start its trace over. Plain calls never read the
    attribute, and where torch 2.13 or later is imported first no mark is set at all. Before
    2.13, once torch is imported, Dynamo is also told to run devshim's own functions as they are
    where it meets them outside a trace (`_traced.run_devshim_uncompiled`).

    Example:
        >>> dispatch.follow_torch_release()
    """
    found = release("torch")
    supported = found is not None and found >= COMPILE_SUPPORT
    if supported and not _marked:
        return
    attribute = _dynamo_inline_attribute()
    traced = _torch_module("_traced")
    for function in _entry_points:
        if supported:
            vars(function).pop(attribute, None)
        elif function not in _marked:
            setattr(function, attribute, traced.TRACED.get(function.__name__) or _stand_in(function))
    _marked.clear()
    if not supported:
        _marked.update(_entry_points)
        if found is not None:
            traced.run_devshim_uncompiled()


def _torch_module(name: str):
    """One module of the torch backend, loaded by name as the registry loads a backend's modules
    (`_internals` and `_traced` import no torch)."""
    return registry.specs()["torch"].module(name)


def _dynamo_inline_attribute() -> str:
    """The attribute Dynamo reads (a torch internal: torch's `_internals`)."""
    return _torch_module("_internals").DYNAMO_INLINE_ATTRIBUTE


def _stand_in(function):
    name = function.__name__

    def stand_in(*args, **kwargs):
        _refuse_compile(name)  # run by Dynamo in plain Python: raises on a torch older than 2.13
        return function(*args, **kwargs)

    stand_in.__qualname__ = stand_in.__name__ = f"{name}_inside_torch_compile"
    return stand_in


def _constant_stand_in(function):
    def stand_in(*args, **kwargs):
        return function(*args, **kwargs)

    # Dynamo installs what it keeps as a global of the compiled function's module, named after the
    # function: the "_devshim" prefix keeps it apart from the module's own names.
    stand_in.__qualname__ = stand_in.__name__ = f"_devshim_{function.__name__}_inside_torch_compile"
    return trace_constant(stand_in)


@trace_constant
def _refuse_compile(name: str) -> None:
    found = release("torch")
    if found is not None and found >= COMPILE_SUPPORT:
        follow_torch_release()
        return
    spelled = ".".join(map(str, found)) if found else "unknown"
    traced = ", ".join(f"ds.{each}" for each in _torch_module("_traced").TRACED)
    raise TorchCompileReleaseError(
        f"ds.{name} inside torch.compile needs torch 2.13 or later; this is torch {spelled}, whose "
        f"Dynamo cannot trace devshim's dispatch (devshim gives it a form of {traced} it can trace, "
        f"not of ds.{name}). Call ds.{name} outside the compiled function and pass its result in, "
        f"or upgrade torch to 2.13 or later."
    )

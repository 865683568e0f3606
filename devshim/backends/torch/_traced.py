"""devshim's tensor calls as torch.compile traces them on torch before 2.13.

Dynamo before torch 2.13 cannot trace devshim's dispatch (its tables keyed by class, the
backends' closures). There, Dynamo traces these functions in place of `ds.device_of`,
`ds.neutral_device`, `ds.to_device`, `ds.copy_if_needed` and `ds.same_device`
(`devshim.backends.dispatch` hands them to it; eager calls never see them): plain Python over
torch tensors that Dynamo inlines, with what is no tensor op (a device spec resolved, a class
classified, an error raised) run outside the trace (`trace_constant`). They return what the
eager calls return: `to_device` always copies (`x.to(device, copy=True)`),
`copy_if_needed` returns a tensor already there, and a container in which nothing had to be
copied, as itself; `skip_keys`, `non_blocking` and leaves that are no tensor behave as
eagerly. They walk dicts, lists, tuples and namedtuples; another container, or a tensor of
another framework, is refused by name (`TorchCompileReleaseError`).

Example:
    >>> from devshim.backends.torch import _traced as traced
    >>> traced.TRACED["to_device"]({"x": torch.ones(1)}, "cpu")
    {'x': tensor([1.])}
"""

from __future__ import annotations

import sys
from types import CodeType

from devshim import _tree
from devshim._device import Device
from devshim._trace import trace_constant
from devshim.backends import dispatch, registry
from devshim.backends.probes import release
from devshim.backends.selection import get_backend
from devshim.backends.torch import _internals
from devshim.errors import NotATensorError, TorchCompileReleaseError

__all__ = ["TRACED", "run_devshim_uncompiled", "device_of", "neutral_device", "to_device", "copy_if_needed", "same_device"]

# What a value is, beyond _tree's container kinds (which are 0 and up; LEAF is a plain value):
# a torch tensor, a leaf with a `.to` method (which takes non_blocking, or not), a tensor of
# another framework.
TENSOR, MOVABLE, MOVABLE_BLOCKING, FOREIGN, DEVICE = -1, -2, -3, -4, -5
# The first item of the tuple that stands for a ds.Device given as the target (`_constant_spec`).
_DEVICE_SPEC = "devshim.Device"
# The containers these functions walk (the rest are refused by name), and what to_device and
# copy_if_needed take.
_WALKED = (_tree.DICT, _tree.LIST, _tree.TUPLE, _tree.NAMEDTUPLE)
_COPIED = (TENSOR, MOVABLE, MOVABLE_BLOCKING, *_WALKED)
_ONE_TENSOR = ("device_of", "neutral_device")  # the functions that take a tensor alone


def device_of(x):
    """`ds.device_of` as Dynamo traces it: `x.device`.

    Example:
        >>> device_of(torch.ones(1))
        device(type='cpu')
    """
    return _tensor(x, "device_of").device


def neutral_device(x):
    """`ds.neutral_device` as Dynamo traces it: the `ds.Device` of `x.device`.

    Example:
        >>> neutral_device(torch.ones(1))
        Device('cpu:0', backend='torch')
    """
    return _devshim_describe(_tensor(x, "neutral_device").device)


def _tensor(x, function: str):
    """`x`, a torch tensor (else the eager call's error for `function`)."""
    _devshim_follow_release()
    if _devshim_kind(type(x)) != TENSOR:
        _devshim_refuse(type(x), function)
    return x


def to_device(x, device, *, non_blocking=False, skip_keys=None):
    """`ds.to_device` as Dynamo traces it: every tensor in `x` copied, in new containers.

    Example:
        >>> to_device([torch.ones(1), "ids"], "cpu")
        [tensor([1.]), 'ids']
    """
    _devshim_follow_release()
    return _copied(x, device, non_blocking, skip_keys, False, "to_device")


def copy_if_needed(x, device, *, non_blocking=False, skip_keys=None):
    """`ds.copy_if_needed` as Dynamo traces it: the tensors not on `device` copied there.

    Example:
        >>> batch = {"x": torch.ones(1)}
        >>> copy_if_needed(batch, "cpu") is batch
        True
    """
    _devshim_follow_release()
    return _copied(x, device, non_blocking, skip_keys, True, "copy_if_needed")


def same_device(*xs):
    """`ds.same_device` as Dynamo traces it: whether the tensors in `xs` share one device.

    Example:
        >>> same_device(torch.ones(1), {"y": torch.ones(2)})
        True
    """
    _devshim_follow_release()
    found = []
    _devices(xs, found)  # (a tuple of nests)
    for place in found[1:]:
        if place != found[0]:
            return False
    return True


def run_devshim_uncompiled() -> None:
    """Have Dynamo run devshim's own functions as they are wherever it meets one outside a trace
    (torch before 2.13; `dispatch.follow_torch_release` calls this once torch is imported).

    Dynamo compiles every function called from code it runs uncompiled: a compiled function that
    traced no op at all (Dynamo runs those as they are, torch 2.4's under `fullgraph=True` too),
    code after a graph break, `torch.compile(ds.to_device)` itself. Dynamo before 2.13 cannot
    trace devshim's dispatch, so each code object of the devshim modules loaded now (but this one,
    whose functions it traces) is one Dynamo skips (torch's `skip_code`): such a call runs as
    eagerly. Calls Dynamo traces are not affected (it inlines them, not asking its skip list).

    Example:
        >>> run_devshim_uncompiled()
    """
    skip = _internals.SKIP_CODE.get()
    if skip is None:
        return
    for name, module in list(sys.modules.items()):
        if module is None or name in _uncompiled or not (name == "devshim" or name.startswith("devshim.")):
            continue
        _uncompiled.add(name)
        if name != __name__:
            for code in _code_objects(module):
                skip(code)


_uncompiled: set = set()  # the devshim modules whose code Dynamo skips


def _code_objects(module):
    """The code objects of the functions and methods defined in `module`, nested ones included."""
    found = []
    for value in list(vars(module).values()):
        members = list(vars(value).values()) if isinstance(value, type) and value.__module__ == module.__name__ else [value]
        for member in members:
            member = getattr(member, "__func__", member)  # staticmethod, classmethod
            if isinstance(member, property):
                members.extend(part for part in (member.fget, member.fset, member.fdel) if part is not None)
                continue
            code = getattr(member, "__code__", None)
            if isinstance(code, CodeType) and getattr(member, "__module__", None) == module.__name__:
                found.extend(_nested(code))
    return found


def _nested(code):
    found = [code]
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            found.extend(_nested(constant))
    return found


#: ds.<name> -> the function Dynamo traces in its place (`devshim.backends.dispatch`).
TRACED = {function.__name__: function for function in (device_of, neutral_device, to_device, copy_if_needed,
                                                       same_device)}


def _copied(x, device, non_blocking, skip_keys, keep_unchanged, function):
    kind = _devshim_kind(type(x))
    if kind not in _COPIED:
        _devshim_refuse(type(x), function)
    targets = [None, None]  # `device` as torch's native device, and as the selected backend's: on first need
    device = _constant_spec(device)
    how = (device, non_blocking, _devshim_skip_keys(skip_keys), keep_unchanged, function)
    copied = _copy(x, kind, how, targets)[0]
    if targets[0] is None and targets[1] is None:
        _devshim_selected_target(device)  # no tensor in the nest: the device is still checked, as eagerly
    return copied


def _constant_spec(device):
    """`device`, or for a `ds.Device` what names it as constants (Dynamo before torch 2.6 hands
    no object of a class of devshim's to a function it runs in plain Python)."""
    if _devshim_kind(type(device)) == DEVICE:
        return (_DEVICE_SPEC, device.kind, device.index, device.virtual, device.backend)
    return device


def _copy(x, kind, how, targets):
    """`(x's copy, whether it is a new value)` for one value of `kind`; `how` is
    `(device, non_blocking, skip_keys, keep_unchanged, function)`."""
    if kind == TENSOR:
        if targets[0] is None:
            targets[0] = _devshim_torch_target(how[0])
        if how[3] and x.device == targets[0]:
            return x, False
        return x.to(targets[0], non_blocking=how[1], copy=True), True
    if kind == MOVABLE or kind == MOVABLE_BLOCKING:
        if targets[1] is None:
            targets[1] = _devshim_selected_target(how[0])
        moved = x.to(targets[1], non_blocking=True) if how[1] and kind == MOVABLE else x.to(targets[1])
        return moved, moved is not x
    if kind in _WALKED:
        return _copy_items(x, kind, how, targets)
    if kind == FOREIGN or kind > _tree.LEAF:  # a container of another kind
        _devshim_refuse(type(x), how[4])
    return x, False


def _copy_items(x, kind, how, targets):
    """`_copy` of a dict, list, tuple or namedtuple, item by item (a dict's items under `skip_keys` kept)."""
    skip = how[2] if kind == _tree.DICT else None
    items = []
    changed = False
    for key, item in x.items() if kind == _tree.DICT else enumerate(x):
        if skip is None or key not in skip:
            item, new_is_other = _copy(item, _devshim_kind(type(item)), how, targets)
            changed = changed or new_is_other
        items.append(item)
    if how[3] and not changed:
        return x, False
    if kind == _tree.DICT:
        return dict(zip(x, items)), True
    if kind == _tree.LIST:
        return items, True
    if kind == _tree.TUPLE:
        return tuple(items), True
    return type(x)(*items), True


def _devices(x, found):
    """Append the device of each tensor in the nest `x` to `found`."""
    kind = _devshim_kind(type(x))
    if kind == TENSOR:
        found.append(x.device)
    elif kind == _tree.DICT:
        for item in x.values():
            _devices(item, found)
    elif kind in _WALKED:
        for item in x:
            _devices(item, found)
    elif kind == FOREIGN or kind > _tree.LEAF:
        _devshim_refuse(type(x), "same_device")


# What runs outside the trace: Dynamo calls these in plain Python and keeps what they return (their
# arguments are constants there: classes, device specs). Dynamo installs each result as a global of
# the compiled function's module, named after the function: the "_devshim" prefix keeps those
# names apart from the module's own.


@trace_constant
def _devshim_follow_release() -> None:
    """On torch 2.13 and later, whose Dynamo traces devshim's own dispatch, these functions are
    met only when torch was imported after `devshim.api` and no devshim call came before the
    compile: take them off devshim's functions (`dispatch.follow_torch_release`) and have
    Dynamo start its trace over (the torch adapter's `restart_trace`), now tracing the functions
    themselves. Where it cannot start over, this trace goes on here."""
    dispatch.follow_torch_release()  # (before 2.13: devshim modules loaded since run uncompiled too)
    found = release("torch")
    if found is not None and found >= dispatch.COMPILE_SUPPORT:
        get_backend("torch").restart_trace()


@trace_constant
def _devshim_kind(kind: type) -> int:
    """What values of class `kind` are: `TENSOR`, a container kind of `devshim._tree`,
    `MOVABLE` / `MOVABLE_BLOCKING` (a leaf with a `.to` method, with or without
    `non_blocking`), `FOREIGN` (another framework's tensor), `DEVICE` (a `ds.Device`) or
    `_tree.LEAF`."""
    if issubclass(kind, sys.modules["torch"].Tensor):
        return TENSOR
    if issubclass(kind, Device):
        return DEVICE
    shape = _tree.container_kind(kind)
    if shape != _tree.LEAF:
        return shape
    for adapter in list(registry.loaded_adapters()):
        if adapter.name != "torch" and adapter.is_tensor_type(kind):
            return FOREIGN
    to = getattr(kind, "to", None)
    if not callable(to) or issubclass(kind, (str, bytes, type)):
        return _tree.LEAF
    return MOVABLE if _takes_non_blocking(to) else MOVABLE_BLOCKING


def _takes_non_blocking(method) -> bool:
    import inspect  # (only a leaf with a .to method needs it, met inside a trace)

    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):  # no signature to read: try it, as the eager call does
        return True
    return any(p.name == "non_blocking" or p.kind is p.VAR_KEYWORD for p in parameters)


@trace_constant
def _devshim_torch_target(spec):
    """`spec` as the torch device the eager call copies a torch tensor to."""
    return get_backend("torch").target(_given(spec))


@trace_constant
def _devshim_selected_target(spec):
    """`spec` as the selected backend's device: where a leaf's own `.to` goes, and the device
    checked when a nest holds no tensor (as the eager calls do)."""
    return get_backend().target(_given(spec))


def _given(spec):
    """The spec the call was given (a `ds.Device` again, from `_constant_spec`'s tuple)."""
    if type(spec) is tuple and len(spec) == 5 and spec[0] == _DEVICE_SPEC:
        return Device(spec[1], spec[2], virtual=spec[3], backend=spec[4])
    return spec


@trace_constant
def _devshim_describe(native):
    return get_backend("torch").describe(native)


@trace_constant
def _devshim_skip_keys(skip_keys):
    """`skip_keys` as a tuple of keys (what every Dynamo keeps as a constant), or None."""
    keys = _tree.skip_set(skip_keys)
    return None if keys is None else tuple(keys)


@trace_constant
def _devshim_refuse(kind: type, function: str):
    """The error the eager call raises for a value of class `kind` that is neither a tensor nor
    a nest, or `TorchCompileReleaseError` for a value it takes that this path does not."""
    shape = _devshim_kind(kind)
    if shape in (_tree.LEAF, DEVICE) or shape in (MOVABLE, MOVABLE_BLOCKING) and function in _ONE_TENSOR:
        raise NotATensorError.for_type(kind, function)
    what = "a tensor of another framework" if shape == FOREIGN else "a container of another kind"
    spelled = ".".join(map(str, release("torch") or ("unknown",)))
    raise TorchCompileReleaseError(
        f"ds.{function} inside torch.compile on torch before 2.13 (this is torch {spelled}) takes torch "
        f"tensors and dicts, lists, tuples and namedtuples of them; it met {kind.__module__}.{kind.__qualname__} "
        f"({what}). Pass the tensors in one of those (dict(batch)), call ds.{function} outside the "
        f"compiled function and pass its result in, or upgrade torch to 2.13 or later."
    )

"""Walking nests: dicts, lists, tuples, deques, namedtuples and dataclass instances.

Rebuilt nests hold exactly what went in, with leaves replaced:

- `dict`, `list` and `tuple` subclasses keep their type and instance
  state (`OrderedDict` its order, `defaultdict` its factory, a user
  subclass its attributes); `collections.deque` keeps `maxlen`;
  namedtuples stay namedtuples;
- dataclass instances are copied without calling `__init__` or
  `__post_init__` again (`init=False` fields keep, and map, their values;
  `InitVar` fields without defaults are no obstacle; frozen ones work);
- every other `collections.abc.Mapping` (`UserDict` and its subclasses, such
  as transformers' `BatchEncoding`) keeps its type and attributes: mutable
  ones are copied with `copy.copy` and refilled, others rebuilt from a dict;
- `set` and `frozenset` (and subclasses) are rebuilt with their type;
- everything else is a leaf.

A nest that contains itself raises `NestCycleError`. `skip_keys` names
mapping keys whose values are kept as they are, at any depth.

What kind of container a type is gets decided once per type. The leaf
operation is looked up once per leaf type per walk, by `leaf_for(value)`,
which returns a callable or None ("not a tensor: keep it as it is").

Example:
    >>> map_nest({"a": [1, 2]}, lambda v: (lambda leaf: leaf * 10) if isinstance(v, int) else None)
    {'a': [10, 20]}
"""

from __future__ import annotations

from _collections import deque
from typing import Optional

from devshim._trace import trace_constant
from devshim.errors import NestCycleError, NotATensorError, UnsupportedValueError

__all__ = ["map_nest", "iter_leaves", "is_container", "container_kind", "skip_set"]

# Container kinds. LEAF: not a container.
LEAF, DICT, DICT_SUB, LIST, LIST_SUB, TUPLE, NAMEDTUPLE, TUPLE_SUB, DEQUE, DATACLASS, MAPPING, SET = range(12)
_kinds: dict = {}
_MISSING = object()


@trace_constant
def container_kind(kind: type) -> int:
    """What sort of container instances of `kind` are (`LEAF` when none).

    torch.compile runs this in plain Python and keeps the answer: traced, the first
    classification of a type would change the cache that the compiled code guards on, and
    the second call would compile again.

    Example:
        >>> container_kind(collections.OrderedDict) == DICT_SUB
        True
    """
    found = _kinds.get(kind)
    if found is None:
        found = _kinds[kind] = _classify(kind)
    return found


def _classify(kind: type) -> int:
    if kind is dict:
        return DICT
    if kind is list:
        return LIST
    if kind is tuple:
        return TUPLE
    if issubclass(kind, dict):
        return DICT_SUB
    if issubclass(kind, list):
        return LIST_SUB
    if issubclass(kind, tuple):
        return NAMEDTUPLE if hasattr(kind, "_fields") else TUPLE_SUB
    if issubclass(kind, deque):
        return DEQUE
    if hasattr(kind, "__dataclass_fields__"):
        return DATACLASS
    if issubclass(kind, (set, frozenset)):
        return SET
    from collections.abc import Mapping  # once per type; collections.abc is loaded at startup

    if issubclass(kind, Mapping):
        return MAPPING
    return LEAF


def skip_set(skip_keys):
    """`skip_keys` (None, one key, or an iterable of keys) as a frozenset, or None.

    Example:
        >>> skip_set("labels"), skip_set(None)
        (frozenset({'labels'}), None)
    """
    if skip_keys is None:
        return None
    if isinstance(skip_keys, (str, bytes)) or not hasattr(skip_keys, "__iter__"):
        return frozenset((skip_keys,))
    return frozenset(skip_keys)


def _cycle(path) -> NestCycleError:
    where = "" if path is None else f" at {path or 'its top level'}"
    return NestCycleError(
        f"This nest contains itself{where}: walking it would never end. Pass a "
        f"nest without the loop (for example the tensors it holds, or a copy without the "
        f"back reference)."
    )


def is_container(x) -> bool:
    """Whether `x` is a nest devshim walks into.

    Example:
        >>> is_container([1]), is_container("ab")
        (True, False)
    """
    return container_kind(type(x)) != LEAF


def _dataclass_fields(x) -> list:
    import dataclasses  # already imported by whoever made the dataclass

    return [field.name for field in dataclasses.fields(x)]


def map_nest(x, leaf_for, keep_unchanged: bool = False, skip_keys=None, function=None, failed=None):
    """Rebuild the nest `x` with each leaf `v` replaced by `leaf_for(v)(v)`.

    `leaf_for(v)` is asked once per leaf type and returns a callable, or
    None for leaves to keep as they are. With `keep_unchanged`, a container
    none of whose leaves changed comes back as itself (`copy_if_needed`);
    without, every container is new (`to_device`). `skip_keys` (a set, see
    `skip_set`): mapping keys whose values are kept as they are, at any depth.
    A nest that contains itself raises `NestCycleError`. `x` may be one leaf
    (a single tensor): it is mapped alone; when `leaf_for` keeps it as it is and
    `function` names the public function asking, that is `NotATensorError`.
    `failed(error)`, where given, sees an error of the walk before it goes on up: whoever
    made the leaf functions names it from what they hold (`nests`: a device out of memory).

    Example:
        >>> map_nest((1, "a"), lambda v: (lambda leaf: -leaf) if isinstance(v, int) else None)
        (-1, 'a')
    """
    if container_kind(type(x)) == LEAF:  # one value, not a nest
        op = leaf_for(x)
        if op is None:
            if function is not None:
                raise NotATensorError.for_value(x, function)
            return x
        try:
            return op(x)
        except Exception as err:
            if failed is not None:
                failed(err)
            raise
    try:
        return _walker(leaf_for, keep_unchanged, skip_keys)(x)
    except RecursionError:  # a loop through something that is not a container we track
        raise _cycle(None) from None
    except Exception as err:
        if _from_recursion(err):  # a framework's C call that hit the limit (ctypes.ArgumentError)
            raise _cycle(None) from None
        if failed is not None:
            failed(err)
        raise


def _walker(leaf_for, keep_unchanged: bool, skip_keys):
    """`value -> value rebuilt` for one walk: each leaf type's function asked of `leaf_for` once."""
    ops: dict = {}  # leaf type -> its leaf function (None: kept as it is), asked once per walk
    open_path: list = []  # the containers being walked: one met again is a loop

    def walk(value):
        kind = type(value)
        op = ops.get(kind, _MISSING)
        if op is not None and op is not _MISSING:
            return op(value)
        shape = container_kind(kind)
        if shape == LEAF:
            if op is _MISSING:
                op = ops[kind] = leaf_for(value)
                if op is not None:
                    return op(value)
            return value
        # Identity against the open path, not a set of id()s: nests are shallow, and torch.compile
        # would guard on every id() taken (compiling again for each new batch object).
        for open_value in open_path:
            if open_value is value:
                raise _cycle(None)
        open_path.append(value)
        try:
            return _MAPPERS[shape](value, walk, ops, keep_unchanged, skip_keys)
        finally:
            open_path.pop()

    return walk


# One function per container kind: `(value, walk, ops, keep_unchanged, skip_keys) -> new`, where
# `walk` maps one item and `ops` is the walk's leaf type -> leaf function (None: kept).


def _map_dict(value, walk, ops, keep_unchanged, skip_keys):
    if skip_keys is not None:
        out = {key: (item if key in skip_keys else walk(item)) for key, item in value.items()}
        return value if keep_unchanged and _same_values(out, value) else out
    # Leaves of a type seen before skip the recursive call: flat dicts of tensors (a state
    # dict, a batch) are the common nest.
    ops_get = ops.get
    out = {}
    if not keep_unchanged:
        for key, item in value.items():
            op = ops_get(type(item))
            out[key] = op(item) if op is not None else walk(item)
        return out
    changed = False
    for key, item in value.items():
        op = ops_get(type(item))
        new = out[key] = op(item) if op is not None else walk(item)
        changed = changed or new is not item
    return out if changed else value


def _map_list(value, walk, ops, keep_unchanged, skip_keys):
    out = [walk(item) for item in value]
    return value if keep_unchanged and _same(out, value) else out


def _map_tuple(value, walk, ops, keep_unchanged, skip_keys):
    out = tuple([walk(item) for item in value])
    return value if keep_unchanged and _same(out, value) else out


def _map_pairs(value, walk, keep_unchanged, skip_keys):
    """(key, new value) of a mapping, or None when `keep_unchanged` and nothing changed."""
    pairs = [(key, item if skip_keys is not None and key in skip_keys else walk(item))
             for key, item in value.items()]
    if keep_unchanged and all(new is value[key] for key, new in pairs):
        return None
    return pairs


def _map_dict_subclass(value, walk, ops, keep_unchanged, skip_keys):
    pairs = _map_pairs(value, walk, keep_unchanged, skip_keys)
    if pairs is None:
        return value
    rebuilt = _copy().copy(value)  # keeps the type, its attributes, a defaultdict's factory
    for key, new in pairs:
        rebuilt[key] = new  # existing keys: the order stays
    return rebuilt


def _map_mapping(value, walk, ops, keep_unchanged, skip_keys):
    pairs = _map_pairs(value, walk, keep_unchanged, skip_keys)
    return value if pairs is None else _rebuild_mapping(value, pairs)


def _map_dataclass(value, walk, ops, keep_unchanged, skip_keys):
    moved = {}
    changed = False
    for name in _dataclass_fields(value):
        try:
            item = getattr(value, name)
        except AttributeError:  # an init=False field no one has set
            continue
        new = moved[name] = walk(item)
        changed = changed or new is not item
    if keep_unchanged and not changed:
        return value
    rebuilt = _copy().copy(value)  # no __init__, no __post_init__: a copy of the state
    for name, new in moved.items():
        object.__setattr__(rebuilt, name, new)  # frozen dataclasses too
    return rebuilt


def _map_set(value, walk, ops, keep_unchanged, skip_keys):
    items = _mapped_items(value, walk, keep_unchanged)
    if items is None:
        return value
    try:
        return _rebuild_set(value, items)
    except TypeError as err:
        raise UnsupportedValueError(
            f"This {type(value).__name__} cannot be rebuilt with its values moved ({err}), and "
            f"devshim never hands a set back with its tensors left where they were. Pass a list "
            f"or tuple of the tensors instead."
        ) from None


def _mapped_items(value, walk, keep_unchanged):
    """The items of a sequence, each walked; None when `keep_unchanged` and none changed."""
    items = [walk(item) for item in value]
    return None if keep_unchanged and _same(items, value) else items


def _map_namedtuple(value, walk, ops, keep_unchanged, skip_keys):
    items = _mapped_items(value, walk, keep_unchanged)
    return value if items is None else type(value)._make(items)


def _map_tuple_subclass(value, walk, ops, keep_unchanged, skip_keys):
    items = _mapped_items(value, walk, keep_unchanged)
    if items is None:
        return value
    try:
        rebuilt = tuple.__new__(type(value), items)
    except TypeError:  # C-level sequences such as struct sequences
        rebuilt = type(value)(items)
    state = getattr(value, "__dict__", None)
    if state:
        rebuilt.__dict__.update(state)
    return rebuilt


def _map_list_subclass(value, walk, ops, keep_unchanged, skip_keys):
    items = _mapped_items(value, walk, keep_unchanged)
    if items is None:
        return value
    rebuilt = _copy().copy(value)  # the type and its attributes stay
    rebuilt[:] = items
    return rebuilt


def _map_deque(value, walk, ops, keep_unchanged, skip_keys):
    items = _mapped_items(value, walk, keep_unchanged)
    if items is None:
        return value
    rebuilt = _copy().copy(value)  # the type, maxlen and attributes stay
    rebuilt.clear()
    rebuilt.extend(items)
    return rebuilt


_MAPPERS = {
    DICT: _map_dict, LIST: _map_list, TUPLE: _map_tuple, DICT_SUB: _map_dict_subclass,
    MAPPING: _map_mapping, DATACLASS: _map_dataclass, SET: _map_set, LIST_SUB: _map_list_subclass,
    TUPLE_SUB: _map_tuple_subclass, NAMEDTUPLE: _map_namedtuple, DEQUE: _map_deque,
}


def _copy():
    import copy  # only nests with subclasses or dataclasses need it

    return copy


def _same(new, old) -> bool:
    for a, b in zip(new, old):
        if a is not b:
            return False
    return True


def _same_values(new: dict, old) -> bool:
    return all(item is old[key] for key, item in new.items())


def _rebuild_set(value, items):
    kind = type(value)
    if kind is set or kind is frozenset:
        return kind(items)
    rebuilt = kind(items)  # a subclass: its constructor takes an iterable, as set's does
    state = getattr(value, "__dict__", None)
    if state:
        rebuilt.__dict__.update(state)
    return rebuilt


def _rebuild_mapping(value, pairs):
    from collections.abc import MutableMapping

    if isinstance(value, MutableMapping):
        rebuilt = _copy().copy(value)  # UserDict: a new .data, the type and its attributes kept
        for key, new in pairs:
            rebuilt[key] = new
        return rebuilt
    try:
        rebuilt = type(value)(dict(pairs))  # read-only mappings: built from a dict
    except TypeError as err:
        raise UnsupportedValueError(
            f"This {type(value).__name__} is a read-only mapping that cannot be built from a dict "
            f"({err}), so devshim cannot hand it back with its tensors moved. Pass dict(value)."
        ) from None
    state = getattr(value, "__dict__", None)
    if state:
        for name, item in state.items():
            rebuilt.__dict__.setdefault(name, item)
    return rebuilt


def iter_leaves(x, path: str = "", _open=None):
    """Yield `(path, leaf)` pairs; the path reads like `[0]['weight']`.

    A nest that contains itself raises `NestCycleError` naming the path.

    Example:
        >>> list(iter_leaves({"a": [1]}))
        [("['a'][0]", 1)]
    """
    shape = container_kind(type(x))
    if shape == LEAF:
        yield path, x
        return
    if _open is None:
        _open = []  # the open containers, compared by identity (see map_nest)
    for open_value in _open:
        if open_value is x:
            raise _cycle(path)
    _open.append(x)
    if shape in (DICT, DICT_SUB, MAPPING):
        for name, value in x.items():
            yield from iter_leaves(value, f"{path}[{name!r}]", _open)
    elif shape == NAMEDTUPLE:
        for name, value in zip(type(x)._fields, x):
            yield from iter_leaves(value, f"{path}.{name}", _open)
    elif shape == DATACLASS:
        for name in _dataclass_fields(x):
            try:
                value = getattr(x, name)
            except AttributeError:
                continue
            yield from iter_leaves(value, f"{path}.{name}", _open)
    elif shape == SET:
        for i, value in enumerate(x):
            yield from iter_leaves(value, f"{path}{{item {i}}}", _open)
    else:
        for i, value in enumerate(x):
            yield from iter_leaves(value, f"{path}[{i}]", _open)
    _open.pop()


def _from_recursion(err: Optional[BaseException]) -> bool:
    """Whether `err` is, or was caused by, Python's recursion limit (MXNet's ctypes calls turn
    a RecursionError into an `ArgumentError` that only names it)."""
    seen = 0
    while err is not None and seen < 8:
        if isinstance(err, RecursionError) or "RecursionError" in str(err):
            return True
        err, seen = err.__cause__ or err.__context__, seen + 1
    return False

"""Walking nests: dicts, lists, tuples, deques, namedtuples and dataclass instances.

Rebuilt nests hold exactly what went in, with leaves replaced:

- ``dict``, ``list`` and ``tuple`` subclasses keep their type and instance
  state (``OrderedDict`` its order, ``defaultdict`` its factory, a user
  subclass its attributes); ``collections.deque`` keeps ``maxlen``;
  namedtuples stay namedtuples;
- dataclass instances are copied without calling ``__init__`` or
  ``__post_init__`` again (``init=False`` fields keep, and map, their values;
  ``InitVar`` fields without defaults are no obstacle; frozen ones work);
- everything else is a leaf.

What kind of container a type is gets decided once per type. The leaf
operation is looked up once per leaf type per walk, by ``leaf_for(value)``,
which returns a callable or None ("not a tensor: keep it as it is").

Example:
    >>> map_nest({"a": [1, 2]}, lambda v: (lambda leaf: leaf * 10) if isinstance(v, int) else None)
    {'a': [10, 20]}
"""

from __future__ import annotations

from _collections import deque

__all__ = ["map_nest", "iter_leaves", "is_container", "container_kind"]

# Container kinds. LEAF: not a container.
LEAF, DICT, DICT_SUB, LIST, LIST_SUB, TUPLE, NAMEDTUPLE, TUPLE_SUB, DEQUE, DATACLASS = range(10)
_kinds: dict = {}
_MISSING = object()


def container_kind(kind: type) -> int:
    """What sort of container instances of ``kind`` are (``LEAF`` when none).

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
    return LEAF


def is_container(x) -> bool:
    """Whether ``x`` is a nest devshim walks into.

    Example:
        >>> is_container([1]), is_container("ab")
        (True, False)
    """
    return container_kind(type(x)) != LEAF


def _dataclass_fields(x) -> list:
    import dataclasses  # already imported by whoever made the dataclass

    return [field.name for field in dataclasses.fields(x)]


def map_nest(x, leaf_for, keep_unchanged: bool = False):
    """Rebuild the nest ``x`` with each leaf ``v`` replaced by ``leaf_for(v)(v)``.

    ``leaf_for(v)`` is asked once per leaf type and returns a callable, or
    None for leaves to keep as they are. With ``keep_unchanged``, a container
    none of whose leaves changed comes back as itself (``copy_if_needed``);
    without, every container is new (``to_device``).

    Example:
        >>> map_nest((1, "a"), lambda v: (lambda leaf: -leaf) if isinstance(v, int) else None)
        (-1, 'a')
    """
    ops: dict = {}
    ops_get = ops.get

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
        if shape == DICT:
            # Leaves of a type seen before skip the recursive call: flat dicts of
            # tensors (a state dict, a batch) are the common nest.
            out = {}
            if not keep_unchanged:
                for key, item in value.items():
                    op = ops_get(type(item))
                    out[key] = op(item) if op is not None and op is not _MISSING else walk(item)
                return out
            changed = False
            for key, item in value.items():
                op = ops_get(type(item))
                new = op(item) if op is not None and op is not _MISSING else walk(item)
                out[key] = new
                changed = changed or new is not item
            return out if changed else value
        if shape == LIST:
            out = [walk(item) for item in value]
            if keep_unchanged and _same(out, value):
                return value
            return out
        if shape == TUPLE:
            out = tuple([walk(item) for item in value])
            if keep_unchanged and _same(out, value):
                return value
            return out
        return _rebuild(value, shape, walk, keep_unchanged)

    try:
        return walk(x)
    except RecursionError:
        raise _too_deep() from None
    except Exception as err:
        if _from_recursion(err):  # a framework's C call that hit the limit (ctypes.ArgumentError)
            raise _too_deep() from None
        raise


def _same(new, old) -> bool:
    for a, b in zip(new, old):
        if a is not b:
            return False
    return True


def _rebuild(value, shape: int, walk, keep_unchanged: bool):
    import copy as _copy  # only nests with subclasses or dataclasses need it
    if shape == DATACLASS:
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
        rebuilt = _copy.copy(value)  # no __init__, no __post_init__: a copy of the state
        for name, new in moved.items():
            object.__setattr__(rebuilt, name, new)  # frozen dataclasses too
        return rebuilt
    if shape == DICT_SUB:
        pairs = [(key, walk(item)) for key, item in value.items()]
        if keep_unchanged and all(new is value[key] for key, new in pairs):
            return value
        rebuilt = _copy.copy(value)  # keeps the type, its attributes, a defaultdict's factory
        for key, new in pairs:
            rebuilt[key] = new  # existing keys: the order stays
        return rebuilt
    items = [walk(item) for item in value]
    if keep_unchanged and _same(items, value):
        return value
    if shape == NAMEDTUPLE:
        return type(value)._make(items)
    if shape == TUPLE_SUB:
        try:
            rebuilt = tuple.__new__(type(value), items)
        except TypeError:  # C-level sequences such as struct sequences
            rebuilt = type(value)(items)
        state = getattr(value, "__dict__", None)
        if state:
            rebuilt.__dict__.update(state)
        return rebuilt
    rebuilt = _copy.copy(value)  # LIST_SUB, DEQUE: the type, maxlen and attributes stay
    if shape == DEQUE:
        rebuilt.clear()
        rebuilt.extend(items)
    else:
        rebuilt[:] = items
    return rebuilt


def iter_leaves(x, path: str = ""):
    """Yield ``(path, leaf)`` pairs; the path reads like ``[0]['weight']``.

    Example:
        >>> list(iter_leaves({"a": [1]}))
        [("['a'][0]", 1)]
    """
    try:
        yield from _iter_leaves(x, path)
    except RecursionError:
        raise _too_deep() from None
    except Exception as err:
        if _from_recursion(err):
            raise _too_deep() from None
        raise


def _iter_leaves(x, path: str):
    shape = container_kind(type(x))
    if shape == LEAF:
        yield path, x
    elif shape in (DICT, DICT_SUB):
        for key, value in x.items():
            yield from _iter_leaves(value, f"{path}[{key!r}]")
    elif shape == NAMEDTUPLE:
        for name, value in zip(type(x)._fields, x):
            yield from _iter_leaves(value, f"{path}.{name}")
    elif shape == DATACLASS:
        for name in _dataclass_fields(x):
            try:
                value = getattr(x, name)
            except AttributeError:
                continue
            yield from _iter_leaves(value, f"{path}.{name}")
    else:
        for i, value in enumerate(x):
            yield from _iter_leaves(value, f"{path}[{i}]")


def _too_deep():
    from devshim.errors import UnsupportedValueError

    return UnsupportedValueError(
        "devshim walks nests as trees, and this one goes deeper than Python's recursion limit: most "
        "likely it holds itself (a cycle, such as a list appended to itself, or a dict that is one of "
        "its own values). Pass a nest without cycles (copy the parts you need into a new dict or list)."
    )


def _from_recursion(err: BaseException) -> bool:
    seen = 0
    while err is not None and seen < 8:
        if isinstance(err, RecursionError) or "RecursionError" in str(err):
            return True
        err, seen = err.__cause__ or err.__context__, seen + 1
    return False

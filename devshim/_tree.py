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
from typing import Any, Optional

from devshim._trace import trace_constant
from devshim.errors import NestCycleError, NotATensorError, UnsupportedValueError

__all__ = ["map_nest", "iter_leaves", "is_container", "container_kind", "skip_set", "node", "leaves", "path_text",
           "zip_leaves", "NestsDiffer"]

# Container kinds. LEAF: not a container.
LEAF, DICT, DICT_SUB, LIST, LIST_SUB, TUPLE, NAMEDTUPLE, TUPLE_SUB, DEQUE, DATACLASS, MAPPING, SET = range(12)
_kinds: dict = {}
_EXACT = {dict: DICT, list: LIST, tuple: TUPLE}  # the builtin containers themselves
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
    if kind in _EXACT:
        return _EXACT[kind]
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

    try:
        return walk(x)
    except RecursionError:  # a loop through something that is not a container we track
        raise _cycle(None) from None
    except Exception as err:
        if _from_recursion(err):  # a framework's C call that hit the limit (ctypes.ArgumentError)
            raise _cycle(None) from None
        if failed is not None:
            failed(err)
        raise


# One function per container kind: `(value, walk, ops, keep_unchanged, skip_keys) -> new`, where
# `walk` maps one item and `ops` is the walk's leaf type -> leaf function (None: kept).


def _map_dict(value, walk, ops, keep_unchanged, skip_keys):
    if skip_keys is not None:
        out = {key: (item if key in skip_keys else walk(item)) for key, item in value.items()}
        return value if keep_unchanged and all(new is value[key] for key, new in out.items()) else out
    # Leaves of a type seen before skip the recursive call: flat dicts of tensors (a state
    # dict, a batch) are the common nest.
    ops_get = ops.get
    out = {}
    for key, item in value.items():
        op = ops_get(type(item))
        out[key] = op(item) if op is not None else walk(item)
    # `out` has value's keys in value's order: its values pair up with value's
    return value if keep_unchanged and _same(out.values(), value.values()) else out


def _map_list(value, walk, ops, keep_unchanged, skip_keys):
    out = [walk(item) for item in value]
    return value if keep_unchanged and _same(out, value) else out


def _map_tuple(value, walk, ops, keep_unchanged, skip_keys):
    out = tuple([walk(item) for item in value])
    return value if keep_unchanged and _same(out, value) else out


def _map_mapping(value, walk, ops, keep_unchanged, skip_keys):
    pairs = [(key, item if skip_keys is not None and key in skip_keys else walk(item))
             for key, item in value.items()]
    if keep_unchanged and all(new is value[key] for key, new in pairs):
        return value
    return _rebuild_mapping(value, pairs)


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


def _sequence_mapper(rebuild):
    """The mapper of a sequence kind: its items walked, and `rebuild(value, items)` unless
    `keep_unchanged` and none of them changed."""

    def map_sequence(value, walk, ops, keep_unchanged, skip_keys):
        items = [walk(item) for item in value]
        return value if keep_unchanged and _same(items, value) else rebuild(value, items)

    return map_sequence


def _rebuild_set(value, items):
    try:
        # set, frozenset or a subclass: its constructor takes an iterable, as set's does
        return _with_state(value, type(value)(items))
    except TypeError as err:
        raise UnsupportedValueError(
            f"This {type(value).__name__} cannot be rebuilt with its values moved ({err}), and "
            f"devshim never hands a set back with its tensors left where they were. Pass a list "
            f"or tuple of the tensors instead."
        ) from None


def _rebuild_namedtuple(value, items):
    return type(value)._make(items)


def _rebuild_tuple_subclass(value, items):
    try:
        rebuilt = tuple.__new__(type(value), items)
    except TypeError:  # C-level sequences such as struct sequences
        rebuilt = type(value)(items)
    return _with_state(value, rebuilt)


def _rebuild_list_subclass(value, items):
    rebuilt = _copy().copy(value)  # the type and its attributes stay
    rebuilt[:] = items
    return rebuilt


def _rebuild_deque(value, items):
    rebuilt = _copy().copy(value)  # the type, maxlen and attributes stay
    rebuilt.clear()
    rebuilt.extend(items)
    return rebuilt


# A dict subclass is a MutableMapping: copied and refilled, as `_rebuild_mapping` does for those.
_MAPPERS = {
    DICT: _map_dict, LIST: _map_list, TUPLE: _map_tuple, DICT_SUB: _map_mapping,
    MAPPING: _map_mapping, DATACLASS: _map_dataclass, SET: _sequence_mapper(_rebuild_set),
    LIST_SUB: _sequence_mapper(_rebuild_list_subclass), TUPLE_SUB: _sequence_mapper(_rebuild_tuple_subclass),
    NAMEDTUPLE: _sequence_mapper(_rebuild_namedtuple), DEQUE: _sequence_mapper(_rebuild_deque),
}


def _copy():
    import copy  # only nests with subclasses or dataclasses need it

    return copy


def _same(new, old) -> bool:
    for a, b in zip(new, old):
        if a is not b:
            return False
    return True


def _with_state(value, rebuilt):
    """`rebuilt`, given the instance attributes `value` has (a subclass's), if any."""
    state = getattr(value, "__dict__", None)
    if state:
        rebuilt.__dict__.update(state)
    return rebuilt


def _rebuild_mapping(value, pairs):
    from collections.abc import MutableMapping

    if isinstance(value, MutableMapping):
        # The type and its attributes kept: a defaultdict's factory, a UserDict's new .data
        rebuilt = _copy().copy(value)
        for key, new in pairs:
            rebuilt[key] = new  # existing keys: the order stays
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


# ------------------------------------------------------------------ nests place by place

#: What a node of a nest is where a walk names each place by its steps (`node`, `leaves`,
#: `zip_leaves`): one value, nothing (None, as JAX's trees have it), or a container whose children
#: are found by key (mappings), field name (namedtuples, dataclasses) or position (lists, tuples,
#: deques; sets in iteration order). A step is `(node kind, key)`; `path_text` writes a path of them.
NODE_LEAF, NODE_EMPTY, NODE_MAPPING, NODE_FIELDS, NODE_SEQUENCE, NODE_SET = (
    "leaf", "empty", "mapping", "fields", "sequence", "set")
_NODES = {DICT: NODE_MAPPING, DICT_SUB: NODE_MAPPING, MAPPING: NODE_MAPPING, NAMEDTUPLE: NODE_FIELDS,
          DATACLASS: NODE_FIELDS, SET: NODE_SET}
#: How a structure difference names each kind of node.
_NODE_NAMES = {NODE_MAPPING: "a mapping", NODE_FIELDS: "a namedtuple or dataclass", NODE_SEQUENCE: "a sequence",
               NODE_SET: "a set", NODE_EMPTY: "None", NODE_LEAF: "a single value"}


def node(value, none_is_leaf: bool = False) -> tuple:
    """`(kind, children)` of one nest node: children are `(step, child)` pairs, a step
    `(kind, key)`; a leaf has none. None is an empty node unless `none_is_leaf`.

    Example:
        >>> node({"a": 1})
        ('mapping', [(('mapping', 'a'), 1)])
    """
    if value is None and not none_is_leaf:
        return NODE_EMPTY, []
    container: Any = value  # (None, as a leaf, never gets past the next line)
    shape = container_kind(type(container))
    if shape == LEAF:
        return NODE_LEAF, []
    kind = _NODES.get(shape, NODE_SEQUENCE)
    if kind == NODE_MAPPING:
        return kind, [((kind, key), item) for key, item in container.items()]
    if kind == NODE_FIELDS:
        names = type(container)._fields if shape == NAMEDTUPLE else _dataclass_fields(container)
        return kind, [((kind, name), getattr(container, name)) for name in names if hasattr(container, name)]
    return kind, [((kind, i), item) for i, item in enumerate(container)]


def path_text(steps: tuple) -> str:
    """A path of steps as Python would index it: `['w'][0].bias`.

    Example:
        >>> path_text((("mapping", "w"), ("sequence", 0), ("fields", "bias")))
        "['w'][0].bias"
    """
    return "".join(f".{key}" if kind == NODE_FIELDS else f"{{item {key}}}" if kind == NODE_SET else f"[{key!r}]"
                   for kind, key in steps)


def leaves(nest, none_is_leaf: bool = False) -> list:
    """`(steps, leaf)` for every leaf of `nest`, in order; a lone value is one leaf at
    `()`. A nest that contains itself raises `NestCycleError` naming the path.

    Example:
        >>> leaves({"w": [1.0]})
        [((('mapping', 'w'), ('sequence', 0)), 1.0)]
    """
    return list(_leaf_steps(nest, (), none_is_leaf, []))


def iter_leaves(x):
    """Yield `(path, leaf)` pairs, None a leaf too; the path reads like `[0]['weight']`.

    A nest that contains itself raises `NestCycleError` naming the path.

    Example:
        >>> list(iter_leaves({"a": [1]}))
        [("['a'][0]", 1)]
    """
    for steps, leaf in _leaf_steps(x, (), True, []):
        yield path_text(steps), leaf


def _leaf_steps(value, steps: tuple, none_is_leaf: bool, open_nodes: list):
    kind, children = node(value, none_is_leaf)
    if kind == NODE_LEAF:
        yield steps, value
        return
    _check_open(value, steps, open_nodes)
    open_nodes.append(value)
    for step, child in children:
        yield from _leaf_steps(child, (*steps, step), none_is_leaf, open_nodes)
    open_nodes.pop()


def _check_open(value, steps: tuple, open_nodes: list) -> None:
    """`NestCycleError` when `value` is one of the containers being walked (compared by identity)."""
    for other in open_nodes:
        if other is value:
            raise _cycle(path_text(steps))


class NestsDiffer(Exception):
    """Two nests `zip_leaves` walked differ in structure: `where` (a path), `why`, and each
    nest's leaves (`first`, `second`: `3 leaves (['a'], ['b'], ['c'])`). It never reaches a
    user: the caller words its own error from it (`ds.testing.assert_allclose`'s)."""

    def __init__(self, steps: tuple, why: str) -> None:
        super().__init__(why)
        self.steps, self.why, self.where, self.first, self.second = steps, why, path_text(steps), "", ""


def zip_leaves(first, second, pair, as_leaf=None) -> None:
    """Walk two nests together and call `pair(steps, leaf, other)` for each pair of leaves:
    mappings matched by key (in whatever order each was written or rebuilt), namedtuples and
    dataclasses by field, sequences by position. A container facing a leaf is one value where
    `as_leaf(container)` makes it one (not None): a list of numbers read as one array. Nests of
    other structures raise `NestsDiffer`; one that contains itself, `NestCycleError`.

    Example:
        >>> zip_leaves({"a": 1}, {"a": 2}, lambda steps, x, y: print(path_text(steps), x, y))
        ['a'] 1 2
    """
    try:
        _zip(first, second, (), pair, as_leaf, [])
    except NestsDiffer as differ:
        differ.first, differ.second = _listing(leaves(first)), _listing(leaves(second))
        raise


def _zip(first, second, steps: tuple, pair, as_leaf, open_nodes: list) -> None:
    (kind_a, children_a), (kind_b, children_b) = node(first), node(second)
    if kind_a == kind_b == NODE_LEAF:
        pair(steps, first, second)
        return
    if NODE_LEAF in (kind_a, kind_b):
        one = None if as_leaf is None else as_leaf(second if kind_a == NODE_LEAF else first)
        if one is None:
            raise NestsDiffer(steps, _difference(kind_a, kind_b, [], []))
        pair(steps, *((first, one) if kind_a == NODE_LEAF else (one, second)))
        return
    keys_a, keys_b = [step for step, _ in children_a], [step for step, _ in children_b]
    if kind_a != kind_b or set(keys_a) != set(keys_b) or len(keys_a) != len(keys_b):
        raise NestsDiffer(steps, _difference(kind_a, kind_b, keys_a, keys_b))
    _check_open(first, steps, open_nodes)
    open_nodes.append(first)
    wanted = dict(children_b) if kind_a in (NODE_MAPPING, NODE_FIELDS) else None
    for position, (step, child) in enumerate(children_a):
        other = children_b[position][1] if wanted is None else wanted[step]
        _zip(child, other, (*steps, step), pair, as_leaf, open_nodes)
    open_nodes.pop()


def _difference(kind_a: str, kind_b: str, keys_a: list, keys_b: list) -> str:
    if kind_a != kind_b:
        return f"actual has {_NODE_NAMES[kind_a]} there, desired {_NODE_NAMES[kind_b]}"
    if kind_a in (NODE_SEQUENCE, NODE_SET):
        return f"actual has {len(keys_a)} items there, desired {len(keys_b)}"
    only_a = [key for _, key in keys_a if (kind_a, key) not in set(keys_b)]
    only_b = [key for _, key in keys_b if (kind_b, key) not in set(keys_a)]
    names = "keys" if kind_a == NODE_MAPPING else "fields"
    return f"{names} only actual has: {_short(only_a)}; only desired has: {_short(only_b)}"


def _short(keys: list) -> str:
    return _first_six([repr(key) for key in keys]) if keys else "none"


def _listing(found: list) -> str:
    if len(found) == 1 and found[0][0] == ():
        return f"one value ({type(found[0][1]).__name__})"
    return f"{len(found)} leaves ({_first_six([path_text(steps) for steps, _ in found])})"


def _first_six(texts: list) -> str:
    return ", ".join(texts[:6]) + (", ..." if len(texts) > 6 else "")


def _from_recursion(err: Optional[BaseException]) -> bool:
    """Whether `err` is, or was caused by, Python's recursion limit (MXNet's ctypes calls turn
    a RecursionError into an `ArgumentError` that only names it)."""
    seen = 0
    while err is not None and seen < 8:
        if isinstance(err, RecursionError) or "RecursionError" in str(err):
            return True
        err, seen = err.__cause__ or err.__context__, seen + 1
    return False

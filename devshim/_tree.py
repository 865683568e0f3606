"""Walking nested containers: dict, list, tuple, namedtuple and dataclass instances.

Everything else is a leaf. ``map_leaves`` rebuilds containers with the same
type, so a namedtuple stays a namedtuple and an OrderedDict stays ordered.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _is_dataclass_instance(x: Any) -> bool:
    return dataclasses.is_dataclass(x) and not isinstance(x, type)


def is_container(x: Any) -> bool:
    return isinstance(x, (dict, list, tuple)) or _is_dataclass_instance(x)


def iter_leaves(x: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Yield ``(path, leaf)`` pairs; the path reads like ``[0]['weight']``."""
    if isinstance(x, dict):
        for key, value in x.items():
            yield from iter_leaves(value, f"{path}[{key!r}]")
    elif _is_namedtuple(x):
        for name, value in zip(type(x)._fields, x):
            yield from iter_leaves(value, f"{path}.{name}")
    elif isinstance(x, (list, tuple)):
        for i, value in enumerate(x):
            yield from iter_leaves(value, f"{path}[{i}]")
    elif _is_dataclass_instance(x):
        for field in dataclasses.fields(x):
            yield from iter_leaves(getattr(x, field.name), f"{path}.{field.name}")
    else:
        yield path, x


def map_leaves(fn: Callable[[Any], Any], x: Any) -> Any:
    """Apply ``fn`` to every leaf and rebuild the containers around the results."""
    if isinstance(x, dict):
        items = [(key, map_leaves(fn, value)) for key, value in x.items()]
        if type(x) is dict:
            return dict(items)
        rebuilt = x.copy()  # keeps subclass state such as defaultdict's factory
        rebuilt.clear()
        rebuilt.update(items)
        return rebuilt
    if _is_namedtuple(x):
        return type(x)(*(map_leaves(fn, value) for value in x))
    if isinstance(x, list):
        values = [map_leaves(fn, value) for value in x]
        return values if type(x) is list else type(x)(values)
    if isinstance(x, tuple):
        values = tuple(map_leaves(fn, value) for value in x)
        return values if type(x) is tuple else type(x)(values)
    if _is_dataclass_instance(x):
        changes = {
            field.name: map_leaves(fn, getattr(x, field.name))
            for field in dataclasses.fields(x)
            if field.init
        }
        return dataclasses.replace(x, **changes)
    return fn(x)

"""`devshim.backends.memory_base`'s count of live objects: what it promises that the mutation env
(`tox -e mutation`, tools/mutation.py) found no test holding it to. `live_objects` scans the whole
heap, and asks whether a type is wanted once per type, not once per object (its verdicts): a
kinds class whose metaclass records each question shows it."""

from __future__ import annotations

from collections import Counter

from devshim.backends.memory_base import live_objects


class _Asked(type):
    """A metaclass that records the type each `issubclass(type, cls)` asks about."""

    asked: Counter = Counter()

    def __subclasscheck__(cls, kind) -> bool:
        _Asked.asked[kind] += 1
        return super().__subclasscheck__(kind)


class _Wanted(metaclass=_Asked):
    pass


class _Plenty:
    pass


def test_live_objects_asks_once_per_type_however_many_objects_have_it():
    wanted = [_Wanted(), _Wanted()]
    plenty = [_Plenty() for _ in range(5)]
    _Asked.asked.clear()
    found = live_objects((_Wanted,))
    asked = dict(_Asked.asked)
    assert sorted(map(id, found)) == sorted(map(id, wanted))
    assert asked[_Plenty] == 1 and asked[_Wanted] == 1  # five and two objects, one question each
    assert max(asked.values()) == 1
    del plenty

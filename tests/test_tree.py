"""The nest walker: every container kind comes back exactly, holding moved leaves.

The leaves are NumPy arrays and the walk is ``ds.to_device``/``ds.copy_if_needed``
to the CPU, so these run in every tox env; the conformance suite covers the
same walks on each framework.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import devshim as ds
from devshim import _tree

Point = collections.namedtuple("Point", "x y")


class Tagged(dict):
    """A user dict subclass with state of its own and a constructor that takes other arguments."""

    def __init__(self, tag, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tag = tag


class Batch(list):
    def __init__(self, items=(), *, split="train"):
        super().__init__(items)
        self.split = split


class Pair(tuple):
    pass


@dataclasses.dataclass
class WithPostInit:
    x: Any
    scale: dataclasses.InitVar[float]
    derived: Any = dataclasses.field(init=False)
    calls: int = dataclasses.field(init=False, default=0)

    def __post_init__(self, scale):
        self.calls += 1
        self.derived = self.x * scale


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: Any
    b: Any = None


@dataclasses.dataclass
class Lazy:
    a: Any
    later: Any = dataclasses.field(init=False)  # never set


def moved(before, after):
    """``after`` holds ``before``'s values in new storage."""
    assert isinstance(after, np.ndarray) and after is not before
    np.testing.assert_array_equal(after, before)
    assert not np.shares_memory(after, before)


def test_dataclasses_are_copied_without_running_post_init_again():
    a = np.arange(3.0)
    source = WithPostInit(a, scale=2.0)
    assert source.calls == 1
    out = ds.to_device(source, "cpu")
    assert type(out) is WithPostInit and out.calls == 1  # __post_init__ did not run again
    moved(source.x, out.x)
    moved(source.derived, out.derived)  # the init=False field moved too
    np.testing.assert_array_equal(out.derived, a * 2.0)


def test_frozen_dataclasses_and_unset_fields():
    frozen = Frozen(np.ones(2), b="label")
    out = ds.to_device(frozen, "cpu")
    assert type(out) is Frozen and out.b == "label"
    moved(frozen.a, out.a)
    lazy = Lazy(np.ones(1))
    out = ds.to_device(lazy, "cpu")
    moved(lazy.a, out.a)
    assert not hasattr(out, "later")


def test_dict_list_and_tuple_subclasses_keep_their_type_and_state():
    a, b = np.ones(2), np.zeros(2)
    nest = {
        "ordered": collections.OrderedDict([("z", a), ("a", b)]),
        "default": collections.defaultdict(list, k=[a]),
        "tagged": Tagged("mine", w=a),
        "batch": Batch([a, b], split="valid"),
        "pair": Pair((a, "x")),
        "point": Point(a, b),
        "deque": collections.deque([a, b], maxlen=5),
    }
    out = ds.to_device(nest, "cpu")
    assert type(out["ordered"]) is collections.OrderedDict and list(out["ordered"]) == ["z", "a"]
    assert type(out["default"]) is collections.defaultdict and out["default"].default_factory is list
    assert type(out["tagged"]) is Tagged and out["tagged"].tag == "mine"
    assert type(out["batch"]) is Batch and out["batch"].split == "valid"
    assert type(out["pair"]) is Pair and out["pair"][1] == "x"
    assert type(out["point"]) is Point
    assert type(out["deque"]) is collections.deque and out["deque"].maxlen == 5
    moved(a, out["ordered"]["z"])
    moved(a, out["tagged"]["w"])
    moved(b, out["batch"][1])
    moved(a, out["point"].x)
    moved(b, out["deque"][1])
    assert nest["default"]["k"][0] is a  # the source is untouched


def test_to_device_rebuilds_every_container_and_copy_if_needed_keeps_untouched_ones():
    leafless = {"n": [1, 2], "s": "text"}
    assert ds.to_device(leafless, "cpu") is not leafless
    assert ds.to_device(leafless, "cpu") == leafless
    assert ds.copy_if_needed(leafless, "cpu") is leafless
    arrays = Tagged("t", x=np.ones(1))
    assert ds.copy_if_needed(arrays, "cpu") is arrays  # NumPy arrays are already on the CPU


def test_struct_sequences_are_rebuilt_through_their_constructor():
    import os

    result = os.stat(".")
    out = ds.to_device([result], "cpu")
    assert type(out[0]) is type(result) and tuple(out[0]) == tuple(result)


def test_paths_name_every_leaf():
    nest = {"a": [1, Point(2, 3)], "b": Frozen(4, []), "d": collections.deque([5])}
    assert [p for p, _ in _tree.iter_leaves(nest)] == [
        "['a'][0]", "['a'][1].x", "['a'][1].y", "['b'].a", "['d'][0]",
    ]


# ------------------------------------------------------------ property: random nests


def _leaves():
    return st.one_of(
        st.builds(lambda n: np.arange(float(n)), st.integers(0, 4)),
        st.integers(), st.text(max_size=3), st.none(),
    )


def _containers(children):
    keys = st.text(min_size=1, max_size=3)
    return st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(keys, children, max_size=4),
        st.dictionaries(keys, children, max_size=4).map(collections.OrderedDict),
        st.dictionaries(keys, children, max_size=4).map(lambda d: collections.defaultdict(list, d)),
        st.dictionaries(keys, children, max_size=4).map(lambda d: Tagged("t", d)),
        st.lists(children, max_size=4).map(lambda items: Batch(items, split="s")),
        st.lists(children, max_size=4).map(lambda items: collections.deque(items, maxlen=9)),
        st.tuples(children, children).map(lambda pair: Point(*pair)),
        st.tuples(children, children).map(lambda pair: Frozen(*pair)),
        st.lists(children, max_size=3).map(Pair),
    )


NESTS = st.recursive(_leaves(), _containers, max_leaves=20)


def _same_shape(before, after, copied: bool):
    assert type(after) is type(before)
    kind = _tree.container_kind(type(before))
    if kind == _tree.LEAF:
        if isinstance(before, np.ndarray):
            if copied:
                moved(before, after)
            else:
                assert after is before
        else:
            assert after is before
        return
    if isinstance(before, dict):
        assert list(after) == list(before)
        for key in before:
            _same_shape(before[key], after[key], copied)
    elif dataclasses.is_dataclass(before):
        for field in dataclasses.fields(before):
            _same_shape(getattr(before, field.name), getattr(after, field.name), copied)
    else:
        assert len(after) == len(before)
        for b, a in zip(before, after):
            _same_shape(b, a, copied)
    for attribute in ("tag", "split", "maxlen", "default_factory"):
        assert getattr(after, attribute, None) == getattr(before, attribute, None)


@settings(max_examples=150, deadline=None)
@given(NESTS)
def test_random_nests_round_trip_exactly(nest):
    if not (_tree.is_container(nest) or isinstance(nest, np.ndarray)):
        with pytest.raises(ds.NotATensorError):  # a bare non-tensor is no nest
            ds.to_device(nest, "cpu")
        return
    _same_shape(nest, ds.to_device(nest, "cpu"), copied=True)
    same = ds.copy_if_needed(nest, "cpu")
    _same_shape(nest, same, copied=False)
    assert same is nest  # nothing had to move: the very same object comes back
    _same_shape(nest, ds.to_numpy(nest), copied=True)


def test_a_bare_non_tensor_is_refused_but_a_nest_of_them_is_walked():
    with pytest.raises(ds.NotATensorError):
        ds.to_device("text", "cpu")
    assert ds.to_device(("text",), "cpu") == ("text",)

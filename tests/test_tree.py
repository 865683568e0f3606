"""devshim._tree on plain Python values: the nest kinds users have, skip_keys, loops."""

from __future__ import annotations

import types
from collections import UserDict
from collections.abc import Mapping

import pytest

import devshim as ds
from devshim import _tree


def _negate(value):
    return (lambda leaf: -leaf) if isinstance(value, int) and not isinstance(value, bool) else None


class Batch(UserDict):
    """Shaped like transformers' BatchEncoding: a UserDict with attributes of its own."""

    def __init__(self, data=None, encodings=None):
        super().__init__(data)
        self.encodings = encodings


class Frozen(Mapping):
    """A read-only Mapping built from a dict."""

    def __init__(self, data):
        self._data = dict(data)

    def __getitem__(self, key):
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)


def test_userdict_subclasses_keep_their_type_and_attributes():
    batch = Batch({"input_ids": 1, "mask": [2, 3]}, encodings="kept")
    out = _tree.map_nest(batch, _negate)
    assert type(out) is Batch and out.encodings == "kept"
    assert dict(out) == {"input_ids": -1, "mask": [-2, -3]}
    assert dict(batch) == {"input_ids": 1, "mask": [2, 3]}  # the input is untouched


def test_read_only_mappings_are_rebuilt_with_their_type():
    out = _tree.map_nest(Frozen({"a": 1}), _negate)
    assert type(out) is Frozen and dict(out) == {"a": -1}
    proxy = _tree.map_nest(types.MappingProxyType({"a": 2}), _negate)
    assert type(proxy) is types.MappingProxyType and dict(proxy) == {"a": -2}


def test_unchanged_mappings_come_back_as_themselves_when_asked():
    batch = Batch({"text": "a"})
    assert _tree.map_nest(batch, _negate, keep_unchanged=True) is batch
    assert _tree.map_nest(batch, _negate) is not batch


@pytest.mark.parametrize("kind", [set, frozenset])
def test_sets_are_rebuilt_with_their_values_mapped(kind):
    out = _tree.map_nest(kind({1, 2}), _negate)
    assert type(out) is kind and out == kind({-1, -2})


@pytest.mark.parametrize("skip", ["labels", ["labels"], {"labels", "other"}])
def test_skip_keys_leave_named_entries_alone_at_any_depth(skip):
    nest = {"labels": 1, "x": 2, "inner": [{"labels": 3, "y": 4}], "batch": Batch({"labels": 5, "z": 6})}
    out = _tree.map_nest(nest, _negate, skip_keys=_tree.skip_set(skip))
    assert out["labels"] == 1 and out["x"] == -2
    assert out["inner"][0] == {"labels": 3, "y": -4}
    assert dict(out["batch"]) == {"labels": 5, "z": -6}


def test_skip_set_reads_one_key_or_many():
    assert _tree.skip_set(None) is None
    assert _tree.skip_set("a") == frozenset({"a"})
    assert _tree.skip_set(("a", "b")) == frozenset({"a", "b"})
    assert _tree.skip_set(3) == frozenset({3})


def _looped():
    inner: list = [1]
    nest = {"a": inner}
    inner.append(nest)
    return nest


def test_a_nest_that_contains_itself_raises_a_named_error():
    for nest in (_looped(), Batch()):
        if isinstance(nest, Batch):
            nest["self"] = nest
        with pytest.raises(ds.NestCycleError) as caught:
            _tree.map_nest(nest, _negate)
        assert isinstance(caught.value, ValueError) and "contains itself" in str(caught.value)
        with pytest.raises(ds.NestCycleError, match="contains itself at"):
            list(_tree.iter_leaves(nest))


def test_the_same_container_twice_is_no_loop():
    shared = [1]
    assert _tree.map_nest({"a": shared, "b": shared}, _negate) == {"a": [-1], "b": [-1]}
    assert [leaf for _, leaf in _tree.iter_leaves((shared, shared))] == [1, 1]

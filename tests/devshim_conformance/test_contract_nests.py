"""Conformance: nests as users have them (Hugging Face batches, objects with .to, skip_keys,
sets, loops), moved by to_device and copy_if_needed on every backend, to every device."""

from __future__ import annotations

from collections import UserDict, namedtuple

import pytest

import devshim as ds

Pair = namedtuple("Pair", "a b")


class Batch(UserDict):
    """Shaped like transformers' BatchEncoding: a UserDict with attributes of its own."""

    def __init__(self, data=None, encodings=None):
        super().__init__(data)
        self.encodings = encodings


class Movable:
    """No tensor, but a .to(device) method, as a torch module or a batch object has."""

    def __init__(self, where=None, non_blocking=None):
        self.where, self.non_blocking = where, non_blocking

    def to(self, device, non_blocking=False):
        return Movable(device, non_blocking)


def _target():
    return ds.try_gpu(ds.num_gpus() - 1) if ds.num_gpus() else ds.cpu()


@pytest.mark.parametrize("move", [ds.to_device, ds.copy_if_needed])
def test_a_userdict_batch_comes_back_with_its_type_attributes_and_tensors_moved(harness, move):
    x, y = harness.tensor([1.0, 2.0]), harness.tensor([3.0])
    batch = Batch({"input_ids": x, "labels": [y, "text"], "n": 3}, encodings=["e"])
    target = _target()
    out = move(batch, target)
    assert type(out) is Batch and out.encodings == ["e"] and out["n"] == 3
    assert ds.neutral_device(out["input_ids"]) == ds.neutral_device(harness.tensor([0.0], device=target))
    assert ds.same_device(out["input_ids"], out["labels"][0]) and out["labels"][1] == "text"
    assert harness.values(out["input_ids"]).tolist() == [1.0, 2.0]
    if move is ds.to_device:
        assert out is not batch and out["input_ids"] is not x


def test_copy_if_needed_hands_a_batch_already_there_back_as_itself(harness):
    batch = Batch({"x": harness.tensor([1.0])})
    assert ds.copy_if_needed(batch, ds.device_of(batch["x"])) is batch


@pytest.mark.parametrize("move", [ds.to_device, ds.copy_if_needed])
def test_skip_keys_leave_named_entries_where_they_are_at_any_depth(harness, move):
    x = harness.tensor([1.0])
    nest = {"labels": x, "x": x, "deeper": [Batch({"labels": x, "y": x})]}
    out = move(nest, _target(), skip_keys="labels")
    assert out["labels"] is x and out["deeper"][0]["labels"] is x
    assert harness.values(out["x"]).tolist() == [1.0]
    if move is ds.to_device:
        assert out["x"] is not x and out["deeper"][0]["y"] is not x
    assert move(nest, _target(), skip_keys=["labels", "x", "deeper"])["x"] is x


@pytest.mark.parametrize("move", [ds.to_device, ds.copy_if_needed])
def test_objects_with_a_to_method_are_moved_by_it_and_its_result_kept(harness, move):
    target = _target()
    out = move({"obj": Movable(), "t": harness.tensor([1.0])}, target)
    assert isinstance(out["obj"], Movable) and out["obj"].where == target
    assert move(Movable(), target).where == target


def test_non_blocking_is_passed_on_to_to_methods_and_copies(harness):
    target = _target()
    out = ds.to_device({"obj": Movable(), "t": harness.tensor([1.0, 2.0])}, target, non_blocking=True)
    assert out["obj"].non_blocking is True
    ds.synchronize()
    assert harness.values(out["t"]).tolist() == [1.0, 2.0]
    single = ds.copy_if_needed(harness.tensor([5.0]), target, non_blocking=True)
    ds.synchronize()
    assert harness.values(single).tolist() == [5.0]


@pytest.mark.parametrize("kind", [set, frozenset])
def test_sets_of_tensors_are_rebuilt_on_the_target(harness, kind):
    x = harness.tensor([1.0])
    try:
        hash(x)
    except (TypeError, NotImplementedError):  # MXNet raises NotImplementedError
        pytest.skip(f"{harness.name} tensors are unhashable, so no set holds one")
    target = _target()
    out = ds.to_device(kind([x]), target)
    assert type(out) is kind and len(out) == 1
    (moved,) = out
    assert moved is not x and ds.neutral_device(moved) == ds.neutral_device(ds.to_device(x, target))


@pytest.mark.parametrize("move", [ds.to_device, ds.copy_if_needed, ds.same_device])
def test_a_nest_that_contains_itself_raises_nest_cycle_error(harness, move):
    batch = Batch({"x": harness.tensor([1.0])})
    batch["again"] = [batch]
    with pytest.raises(ds.NestCycleError):
        move(batch) if move is ds.same_device else move(batch, ds.cpu())


def test_namedtuples_and_tuples_keep_their_type(harness):
    x = harness.tensor([1.0])
    out = ds.to_device(Pair(x, (x, 2)), _target())
    assert type(out) is Pair and type(out.b) is tuple and out.b[1] == 2


def _each_container(t):
    """The containers a training loop hands over, each with tensors, a nested list and plain leaves."""
    plain = object()
    return {
        "tuple": (t, [t, t], 1, plain),
        "dict": {"a": t, "b": [t, t], "c": 1, "d": plain},
        "namedtuple": Pair(a=t, b=[t, t, 1, plain]),
        "UserDict": UserDict({"a": t, "b": [t, t], "c": 1, "d": plain}),
    }


@pytest.mark.parametrize("kind", ["tuple", "dict", "namedtuple", "UserDict"])
@pytest.mark.parametrize("move", [ds.to_device, ds.copy_if_needed])
def test_each_container_kind_moves_with_its_type_and_keeps_other_leaves_as_they_are(harness, move, kind):
    t = harness.tensor([1.0, 2.0])
    target = _target()
    nest = _each_container(t)[kind]
    out = move(nest, target)
    assert type(out) is type(nest)
    pairs = list(zip(nest.values(), out.values())) if kind in ("dict", "UserDict") else list(zip(nest, out))
    for before, after in pairs:
        if type(before) is list:
            assert type(after) is list and len(after) == len(before)
        for b, a in zip(before, after) if type(before) is list else [(before, after)]:
            if b is t:
                assert ds.neutral_device(a) == ds.neutral_device(harness.tensor([0.0], device=target))
                assert harness.values(a).tolist() == [1.0, 2.0]
                if move is ds.to_device:
                    assert a is not t
                else:  # kept where it already is, copied otherwise
                    assert (a is t) == (ds.neutral_device(t) == ds.neutral_device(a))
            else:
                assert a is b  # ints and other objects come back themselves


class MovableNoNonBlocking:
    """A .to(device) without a non_blocking keyword (older or third-party batch objects)."""

    def __init__(self, where=None):
        self.where = where

    def to(self, device):
        return MovableNoNonBlocking(device)


def test_to_methods_without_non_blocking_are_called_without_it(harness):
    target = _target()
    for move in (ds.to_device, ds.copy_if_needed):
        out = move({"obj": MovableNoNonBlocking(), "t": harness.tensor([1.0])}, target, non_blocking=True)
        assert isinstance(out["obj"], MovableNoNonBlocking) and out["obj"].where == target
    ds.synchronize()


def test_skip_keys_may_be_any_collection_of_keys(harness):
    x = harness.tensor([1.0])
    nest = {"a": x, "b": x, "c": [{"a": x}]}
    for keys in (("a", "b"), {"a", "b"}, frozenset({"a", "b"})):
        out = ds.to_device(nest, _target(), skip_keys=keys)
        assert out["a"] is x and out["b"] is x and out["c"][0]["a"] is x

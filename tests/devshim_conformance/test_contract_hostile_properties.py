"""Property layer (issue 19): hostile input to the public API, on every backend.

Random nests of every container kind devshim walks (dicts and subclasses, lists,
tuples, namedtuples, deques, dataclasses), with tensors, non-tensor leaves, empty
containers and cycles; random device specs, valid, foreign and malformed; random
misuse of the placement helpers. Properties: a promised copy never shares memory
with its input and is on the target device; every exception is a DevshimError
whose message says what to do.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import devshim as ds
from devshim_conformance.test_contract_misuse import says_what_to_do

HOSTILE = settings(max_examples=25, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

Pair = collections.namedtuple("Pair", "first second")


@dataclasses.dataclass
class Box:
    item: object
    label: str = "box"


class Tagged(dict):
    pass


def nests(tensor_leaf):
    leaves = st.one_of(tensor_leaf, st.none(), st.integers(-3, 3), st.text(max_size=3), st.floats(allow_nan=False))
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.lists(inner, max_size=3).map(tuple),
            st.dictionaries(st.text(max_size=2), inner, max_size=3),
            st.dictionaries(st.text(max_size=2), inner, max_size=3).map(Tagged),
            st.dictionaries(st.text(max_size=2), inner, max_size=3).map(collections.OrderedDict),
            st.tuples(inner, inner).map(lambda t: Pair(*t)),
            st.lists(inner, max_size=3).map(collections.deque),
            inner.map(Box),
        ),
        max_leaves=6,
    )


def _leaves(nest):
    from devshim._tree import iter_leaves

    return [leaf for _, leaf in iter_leaves(nest)]


def _is_tensor(x) -> bool:
    from devshim.backends import backend_for_tensor

    return backend_for_tensor(x) is not None and not isinstance(x, (int, float, str))


def test_to_device_of_random_nests_copies_every_tensor_and_keeps_the_rest(harness):
    tensor_leaf = st.lists(st.floats(-4, 4, width=32), min_size=1, max_size=3).map(
        lambda values: harness.tensor(values, device=ds.cpu()))

    @HOSTILE
    @given(nests(tensor_leaf), st.integers(0, 8))
    def check(nest, pick):
        devices = ds.devices()
        target = devices[pick % len(devices)]
        if not any(_is_tensor(leaf) for leaf in _leaves(nest)):
            try:
                moved = ds.to_device(nest, target)
            except ds.NotATensorError as err:  # documented: a lone value that is no tensor
                assert says_what_to_do(err)
            else:
                assert _leaves(moved) == _leaves(nest)  # containers without tensors: leaves kept
            return
        moved = ds.to_device(nest, target)
        before, after = _leaves(nest), _leaves(moved)
        assert len(before) == len(after)
        for a, b in zip(before, after):
            if _is_tensor(a) and not isinstance(a, np.generic):
                assert b is not a and not harness.aliases(a, b)
                assert ds.device_of(b) == ds.device_of(ds.to_device(harness.tensor([0.0]), target))
                np.testing.assert_array_equal(harness.values(a), harness.values(b))
            else:
                assert b is a or b == a
        same = ds.copy_if_needed(nest, ds.cpu())
        assert same is nest  # every tensor already there: the nest itself

    check()


def test_cyclic_nests_are_a_named_error(harness):
    x = harness.tensor([1.0])
    looped = [x]
    looped.append(looped)
    selfish = {"x": x}
    selfish["me"] = selfish
    for nest in (looped, selfish, Box(looped)):
        for call in (lambda n: ds.to_device(n, ds.cpu()), lambda n: ds.copy_if_needed(n, ds.cpu()),
                     ds.to_numpy, ds.same_device):
            with pytest.raises(ds.NestCycleError, match="contains itself|loop") as info:
                call(nest)
            assert says_what_to_do(info.value)


SPECS = st.one_of(
    st.sampled_from(["cpu", "gpu", "gpu:0", "gpu:1", "cuda", "cuda:1", "/GPU:0", "/CPU:0", "gpu(1)",
                     "meta", "mps", "tpu:0", "xpu", "npu:3", "gpu:-1", "gpu:99", "cpu:7", "", " ",
                     "gpu:", ":0", "gpu:1:2", "cuda:x", "GPU", "vgpu:0", "gpu(1", "🙂"]),
    st.text(max_size=8),
    st.integers(-2, 3), st.none(), st.floats(allow_nan=True), st.booleans(),
    st.builds(ds.Device, st.sampled_from(["cpu", "gpu"]), st.integers(0, 3)),
    st.lists(st.just("cpu"), max_size=2),
)


def test_random_device_specs_resolve_or_get_a_named_error(harness):
    @HOSTILE
    @given(SPECS)
    def check(spec):
        try:
            native = ds.device(spec)
        except ds.DevshimError as err:
            assert isinstance(err, (ds.InvalidDeviceError, ds.DeviceUnavailableError)), err
            assert says_what_to_do(err), err
            return
        kind = ds.get_backend().describe(native).kind
        assert kind in ("cpu", "meta") or native in ds.devices()  # a GPU it gives is one it has
        x = harness.tensor([1.0, 2.0])
        try:
            y = ds.to_device(x, spec)
        except ds.DevshimError as err:  # a device that holds no data ("meta")
            assert says_what_to_do(err), err
        else:
            assert y is not x and not harness.aliases(x, y)

    check()


def test_random_misuse_of_the_placement_helpers_gets_named_errors(harness):
    arrays = st.one_of(
        st.builds(lambda n: harness.tensor([[float(i)] for i in range(n)]) if n else harness.tensor(1.0),
                  st.integers(0, 5)),
        st.builds(lambda n: harness.tensor([float(i) for i in range(n)], dtype="float32"), st.integers(1, 4)),
        st.sampled_from([None, "x", 3, [1, 2]]),
    )
    device_lists = st.one_of(
        st.lists(st.sampled_from(["cpu", "gpu:0", "gpu:1", "mps", "bogus", ds.Device("cpu")]), max_size=4),
        st.sampled_from(["cpu", "gpu", None, 0, ds.Device("cpu")]),
    )

    @HOSTILE
    @given(st.lists(arrays, max_size=3), device_lists, st.booleans())
    def check(values, devices, reduce):
        try:
            if reduce:
                results = ds.allreduce(values)
                for r in results:
                    for v in values:
                        assert r is not v and not harness.aliases(r, v)
            else:
                shards = ds.split_batch(*values, devices)
                if len(values) == 1:
                    shards = [shards]
                for tensor, parts in zip(values, shards):
                    total = np.concatenate([np.asarray(harness.values(s)) for s in parts])
                    np.testing.assert_array_equal(total, np.asarray(harness.values(tensor)))
        except ds.DevshimError as err:
            assert says_what_to_do(err), err

    check()

"""The neutral Device and the spec parser (no framework needed)."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import devshim as ds
from devshim._device import parse_spec, register_platform


@pytest.mark.parametrize("spec,expected", [
    ("cpu", ("cpu", 0, None)), ("CPU:0", ("cpu", 0, None)), ("cpu(1)", ("cpu", 1, None)),
    ("gpu", ("gpu", 0, None)), ("gpu:3", ("gpu", 3, None)), ("gpu(2)", ("gpu", 2, None)),
    ("cuda", ("gpu", 0, "cuda")), ("cuda:1", ("gpu", 1, "cuda")), ("mps", ("gpu", 0, "mps")),
    ("xpu:2", ("gpu", 2, "xpu")), ("tpu", ("gpu", 0, "tpu")), ("mtia:1", ("gpu", 1, "mtia")),
    ("meta", ("meta", 0, None)), ("meta:0", ("meta", 0, None)),
    ("/GPU:1", ("gpu", 1, None)), ("/device:GPU:0", ("gpu", 0, None)), ("/CPU:0", ("cpu", 0, None)),
    ("/job:localhost/replica:0/task:0/device:GPU:2", ("gpu", 2, None)),
    ("  gpu:1  ", ("gpu", 1, None)),
])
def test_parse_spec_reads_every_accepted_form(spec, expected):
    assert tuple(parse_spec(spec)) == expected
    parsed = parse_spec(spec)
    assert (parsed.kind, parsed.index, parsed.platform) == expected


@pytest.mark.parametrize("spec", ["", "banana", "gpu:", "gpu:-1", "gpu:1:2", "cuda 1", "gpu(1", "xla:0",
                                  "/GPU:x", "meta:1", "gpu:١"])
def test_parse_spec_rejects_the_rest_with_the_accepted_forms(spec):
    with pytest.raises(ds.InvalidDeviceError, match="Accepted forms") as info:
        parse_spec(spec)
    assert repr(spec) in str(info.value)


def test_a_platform_registered_at_run_time_becomes_a_spec():
    with pytest.raises(ds.InvalidDeviceError):
        parse_spec("habana7:1")
    register_platform("habana7")
    assert tuple(parse_spec("habana7:1")) == ("gpu", 1, "habana7")


def test_device_equality_is_kind_index_and_virtual():
    assert ds.Device("gpu", 0) == ds.Device("gpu", 0, backend="torch") == ds.Device("gpu", 0, backend="tensorflow")
    assert ds.Device("gpu", 0) != ds.Device("gpu", 1)
    assert ds.Device("gpu", 0) != ds.Device("cpu", 0)
    assert ds.Device("gpu", 0, virtual=True) != ds.Device("gpu", 0)
    assert ds.Device("meta") != ds.Device("cpu")
    assert len({ds.Device("gpu", 0), ds.Device("gpu", 0, backend="x"), ds.Device("gpu", 1)}) == 2


def test_device_equals_the_spec_strings_naming_the_same_place():
    gpu0 = ds.Device("gpu", 0)
    for spec in ("gpu", "gpu:0", "cuda", "cuda:0", "/GPU:0", "gpu(0)", np.str_("gpu:0")):
        assert gpu0 == spec and not (gpu0 != spec)
    assert gpu0 != "gpu:1" and gpu0 != "cpu" and gpu0 != "garbage"
    assert ds.Device("gpu", 0, virtual=True) == "gpu:0"
    assert ds.Device("meta") == "meta"
    assert (gpu0 == 0) is False


class Hostile:
    """An object whose attribute reads all blow up."""

    def __getattr__(self, name):
        raise RuntimeError("boom")


class HostileString(str):
    """A string subclass whose methods blow up."""

    def strip(self, *args):
        raise RuntimeError("boom")

    def lower(self):
        raise RuntimeError("boom")


@pytest.mark.parametrize("make", [
    lambda: 0, lambda: 1.5, lambda: None, lambda: [1], lambda: {"a": 1}, object, Hostile,
    lambda: b"gpu:0", lambda: ds, lambda: HostileString("gpu:0"),
], ids=["int", "float", "None", "list", "dict", "object", "hostile", "bytes", "module", "hostile-str"])
def test_comparing_with_unknown_objects_is_false_and_never_raises(make):
    other = make()
    d = ds.Device("gpu", 1)
    assert (d == other) is False
    assert (d != other) is True


def test_device_eq_defers_to_the_other_side_for_objects_it_does_not_know():
    assert ds.Device("gpu", 0).__eq__(object()) is NotImplemented
    assert ds.Device("gpu", 0).__eq__(Hostile()) is NotImplemented


# ------------------------------------------------------------ the hash law


KINDS_AND_INDICES = st.tuples(st.sampled_from(["cpu", "gpu", "meta"]), st.integers(0, 9), st.booleans())


@given(KINDS_AND_INDICES, KINDS_AND_INDICES)
def test_equal_devices_hash_alike(a, b):
    (ka, ia, va), (kb, ib, vb) = a, b
    if ka == "meta":
        ia = 0
    if kb == "meta":
        ib = 0
    da, db = ds.Device(ka, ia, virtual=va), ds.Device(kb, ib, virtual=vb, backend="other")
    if da == db:
        assert hash(da) == hash(db)
    assert da == str(da) and hash(da) == hash(str(da))  # its canonical string
    assert {str(da): 1}.get(da) == 1 and {da: 1}.get(str(da)) == 1


def test_canonical_strings_find_devices_in_sets_and_dicts():
    devices = {ds.Device("cpu"), ds.Device("gpu", 1)}
    assert "gpu:1" in devices and "cpu:0" in devices and "gpu:0" not in devices


# ------------------------------------------------------------ immutability, copies, pickle


def test_device_prints_like_a_spec_and_repr_marks_virtual():
    assert str(ds.Device("gpu", 1)) == "gpu:1"
    assert repr(ds.Device("gpu", 1, backend="torch")) == "Device('gpu:1', backend='torch')"
    assert repr(ds.Device("gpu", 1, backend="tensorflow", virtual=True)) == (
        "Device('gpu:1', backend='tensorflow', virtual=True)"
    )


def test_device_is_immutable_and_validates_its_fields():
    d = ds.Device("cpu")
    with pytest.raises(AttributeError, match="immutable"):
        d.index = 3
    with pytest.raises(AttributeError, match="immutable"):
        del d.index
    with pytest.raises(AttributeError, match="immutable"):
        del d.kind
    assert d.index == 0
    for kind, index in [("tpu", 0), ("gpu", -1), ("gpu", 1.0), ("gpu", True)]:
        with pytest.raises(ds.InvalidDeviceError):
            ds.Device(kind, index)


def test_copies_are_the_device_itself():
    marker = object()
    d = ds.Device("gpu", 2, native=marker, backend="torch", platform="cuda")
    assert copy.copy(d) is d and copy.deepcopy(d) is d
    assert copy.deepcopy({"d": d})["d"].native is marker


def test_pickle_keeps_everything_but_the_native_object():
    d = ds.Device("gpu", 2, native=object(), backend="torch", virtual=True, platform="cuda")
    back = pickle.loads(pickle.dumps(d))
    assert back == d and hash(back) == hash(d)
    assert (back.kind, back.index, back.backend, back.virtual, back.platform) == ("gpu", 2, "torch", True, "cuda")


def test_a_device_without_a_backend_has_no_native_object():
    assert ds.Device("cpu").native is None
    assert pickle.loads(pickle.dumps(ds.Device("cpu"))).native is None


def test_a_restored_device_gets_its_native_object_from_its_backend():
    d = pickle.loads(pickle.dumps(ds.neutral_device(np.ones(2))))
    assert d.native == "cpu" and d.backend == "numpy"


def test_a_restored_virtual_device_refuses_where_no_virtual_devices_exist():
    ds.testing.virtual_devices(0)  # conftest restores the environment's choice afterwards
    d = pickle.loads(pickle.dumps(ds.Device("gpu", 0, backend="numpy", virtual=True)))
    with pytest.raises(ds.DeviceUnavailableError, match="virtual GPU"):
        d.native


def test_every_error_derives_from_devshim_error_and_lives_in_errors():
    from devshim import errors

    for name in errors.__all__:
        cls = getattr(errors, name)
        base = ds.DevshimWarning if issubclass(cls, Warning) else ds.DevshimError
        assert issubclass(cls, base) and cls.__module__ == "devshim.errors"
        assert getattr(ds, name) is cls  # exported from devshim
        assert cls.__doc__ and "Example" in cls.__doc__
    assert issubclass(ds.BackendError, ValueError)
    assert issubclass(ds.NotATensorError, TypeError)
    assert issubclass(ds.DeviceMismatchError, RuntimeError)
    assert issubclass(ds.UnsupportedDtypeError, TypeError)
    assert issubclass(ds.ImplicitTransferError, RuntimeError) and issubclass(ds.InvalidGuardLevelError, ValueError)
    assert issubclass(ds.ImplicitTransferWarning, UserWarning)

"""The neutral Device and the spec parser (no framework needed)."""

from __future__ import annotations

import collections
import dataclasses
import pickle

import pytest

import devshim as ds
from devshim import _tree
from devshim.device import parse_spec


@pytest.mark.parametrize("spec,expected", [
    ("cpu", ("cpu", 0, None)), ("CPU:0", ("cpu", 0, None)), ("cpu(1)", ("cpu", 1, None)),
    ("gpu", ("gpu", 0, None)), ("gpu:3", ("gpu", 3, None)), ("gpu(2)", ("gpu", 2, None)),
    ("cuda", ("gpu", 0, "cuda")), ("cuda:1", ("gpu", 1, "cuda")), ("mps", ("gpu", 0, "mps")),
    ("/GPU:1", ("gpu", 1, None)), ("/device:GPU:0", ("gpu", 0, None)), ("/CPU:0", ("cpu", 0, None)),
    ("/job:localhost/replica:0/task:0/device:GPU:2", ("gpu", 2, None)),
    ("  gpu:1  ", ("gpu", 1, None)),
])
def test_parse_spec_reads_every_accepted_form(spec, expected):
    assert tuple(parse_spec(spec)) == expected


@pytest.mark.parametrize("spec", ["", "tpu", "gpu:", "gpu:-1", "gpu:1:2", "cuda 1", "gpu(1", "xla:0", "/GPU:x"])
def test_parse_spec_rejects_the_rest_with_the_accepted_forms(spec):
    with pytest.raises(ds.InvalidDeviceError, match="Accepted forms") as info:
        parse_spec(spec)
    assert repr(spec) in str(info.value)


def test_device_equality_is_kind_index_and_virtual():
    assert ds.Device("gpu", 0) == ds.Device("gpu", 0, backend="torch") == ds.Device("gpu", 0, backend="tensorflow")
    assert ds.Device("gpu", 0) != ds.Device("gpu", 1)
    assert ds.Device("gpu", 0) != ds.Device("cpu", 0)
    assert ds.Device("gpu", 0, virtual=True) != ds.Device("gpu", 0)
    assert len({ds.Device("gpu", 0), ds.Device("gpu", 0, backend="x"), ds.Device("gpu", 1)}) == 2


def test_device_equals_the_spec_strings_naming_the_same_place():
    gpu0 = ds.Device("gpu", 0)
    for spec in ("gpu", "gpu:0", "cuda", "cuda:0", "/GPU:0", "gpu(0)"):
        assert gpu0 == spec
    assert gpu0 != "gpu:1" and gpu0 != "cpu" and gpu0 != "garbage"
    assert ds.Device("gpu", 0, virtual=True) == "gpu:0"
    assert (gpu0 == 0) is False


def test_device_prints_like_a_spec_and_repr_marks_virtual():
    assert str(ds.Device("gpu", 1)) == "gpu:1"
    assert repr(ds.Device("gpu", 1, backend="torch")) == "Device('gpu:1', backend='torch')"
    assert repr(ds.Device("gpu", 1, backend="tensorflow", virtual=True)) == (
        "Device('gpu:1', backend='tensorflow', virtual=True)"
    )


def test_device_is_immutable_and_validates_its_fields():
    d = ds.Device("cpu")
    with pytest.raises(AttributeError):
        d.index = 3
    for kind, index in [("tpu", 0), ("gpu", -1), ("gpu", 1.0), ("gpu", True)]:
        with pytest.raises(ds.InvalidDeviceError):
            ds.Device(kind, index)


def test_device_pickles_without_its_native_object():
    d = ds.Device("gpu", 2, native=object(), backend="torch", virtual=True, platform="cuda")
    back = pickle.loads(pickle.dumps(d))
    assert back == d and back.native is None
    assert (back.backend, back.virtual, back.platform) == ("torch", True, "cuda")


def test_every_error_derives_from_devshim_error():
    for cls in (ds.BackendError, ds.InvalidDeviceError, ds.DeviceUnavailableError,
                ds.DeviceMismatchError, ds.NotATensorError):
        assert issubclass(cls, ds.DevshimError)
    assert issubclass(ds.BackendError, ValueError)
    assert issubclass(ds.NotATensorError, TypeError)


# ------------------------------------------------------------ nested containers

Point = collections.namedtuple("Point", "x y")


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: int
    b: list
    derived: int = dataclasses.field(init=False, default=0)


def test_map_leaves_rebuilds_each_container_type():
    data = {
        "ordered": collections.OrderedDict(b=1, a=2),
        "default": collections.defaultdict(list, k=[3]),
        "point": Point(4, (5, [6])),
        "frozen": Frozen(7, [8]),
    }
    out = _tree.map_leaves(lambda v: v * 10, data)
    assert list(out["ordered"].items()) == [("b", 10), ("a", 20)]
    assert type(out["default"]) is collections.defaultdict and out["default"]["k"] == [30]
    assert out["default"].default_factory is list
    assert out["point"] == Point(40, (50, [60])) and type(out["point"]) is Point
    assert out["frozen"] == Frozen(70, [80])


def test_iter_leaves_names_paths():
    paths = [p for p, _ in _tree.iter_leaves({"a": [1, Point(2, 3)], "b": Frozen(4, [])})]
    assert paths == ["['a'][0]", "['a'][1].x", "['a'][1].y", "['b'].a", "['b'].derived"]

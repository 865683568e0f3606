"""The backend contract's own device paths (`devshim.backends.Backend`: `target`, `copy_fn`,
`copy_if_needed_fn`) and torch's `copy_to`: what the mutation env (`tox -e mutation`,
tools/mutation.py) found no test holding them to.

- A framework that keeps the contract's paths (as MXNet and the array-API plugin do), played
  here by a toy: its own device objects that cannot be hashed are taken (and not remembered),
  a hashable spec resolves to the same device object call after call, `ds.copy_if_needed`
  keeps a tensor already there, and each copy gets the tensor, the device and `non_blocking`
  as asked, whether a transfer guard watches or not.
- The call an out-of-memory error names (`ds.copy_if_needed`, not `ds.to_device`).
- torch: `non_blocking` reaches `Tensor.to`, and a meta tensor copied to a real device is a
  `DatalessTensorError` saying where it was to go.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import devshim as ds
from devshim import backends, settings
from devshim._device import Device


@pytest.fixture(name="torch")
def torch_fixture():
    """torch, imported by the tests that need it."""
    return pytest.importorskip("torch")


# ------------------------------------------------------------------ a framework keeping the contract's paths


@dataclasses.dataclass(frozen=True)
class _Place:
    """The toy's device object: equal by kind and index, a new object each time it is made."""

    kind: str
    index: int


@dataclasses.dataclass
class _LoosePlace:
    """Another device object of the toy's, which (a dataclass with eq) cannot be hashed."""

    kind: str
    index: int


class _Block:
    """The toy's tensor."""

    def __init__(self, where, values) -> None:
        self.where = where
        self.values = np.asarray(values, dtype=np.float32)


class _Contract(backends.Backend):
    """A framework with the contract's own `target`, `copy_fn` and `copy_if_needed_fn`; it records
    each copy as `(tensor, device, non_blocking)`."""

    spec = backends.BackendSpec("toycontract", import_name=__name__, title="A toy framework of the contract")

    def __init__(self) -> None:
        super().__init__()
        self.copies: list = []

    def is_tensor(self, x):
        return isinstance(x, _Block)

    def is_native_device(self, obj):
        return isinstance(obj, (_Place, _LoosePlace))

    def accelerator_count(self):
        return 2

    def make_native_device(self, kind, index):
        return _Place(kind, index)

    def describe(self, native):
        return Device(native.kind, native.index, native=_Place(native.kind, native.index), backend=self.spec.name)

    def tensor_device(self, x):
        return self.describe(x.where)

    def copy_to(self, x, native, non_blocking):
        self.copies.append((x, native, non_blocking))
        return _Block(native, x.values.copy())

    def tensor_to_numpy(self, x):
        return x.values.copy()


@pytest.fixture(name="toy")
def toy_fixture(setenv):
    setenv(settings.VIRTUAL_DEVICES_VAR, None)
    backends.register_backend(_Contract.spec, _Contract)
    try:
        yield backends.get_backend(_Contract.spec.name)
    finally:
        backends.unregister_backend(_Contract.spec.name)


def test_a_hashable_spec_resolves_to_the_same_device_object_call_after_call(toy):
    """Resolved once and remembered: not an equal device made anew."""
    first = toy.target("gpu:1")
    assert first == _Place("gpu", 1) and toy.target("gpu:1") is first


def test_a_device_object_that_cannot_be_hashed_is_taken_without_being_remembered(toy):
    x = _Block(_Place("cpu", 0), [1.0, 2.0])
    loose = _LoosePlace("gpu", 1)
    assert toy.target(loose) is loose
    for _ in range(2):  # the second call takes the lone tensor's fast path
        y = ds.to_device(x, loose)
        assert y.where is loose and y.values.tolist() == [1.0, 2.0]
    assert [native for _, native, _ in toy.copies] == [loose, loose]


def test_copy_if_needed_keeps_a_tensor_already_there_and_copies_one_elsewhere_blocking(toy):
    x = _Block(_Place("gpu", 1), [3.0])
    for _ in range(2):
        assert ds.copy_if_needed(x, "gpu:1") is x
    assert toy.copies == []
    y = ds.copy_if_needed(x, "gpu:0")
    assert y.where == _Place("gpu", 0) and y.values.tolist() == [3.0]
    assert toy.copies == [(x, _Place("gpu", 0), False)]


@pytest.mark.parametrize("watched", [False, True])
def test_each_copy_gets_the_tensor_the_device_and_non_blocking_as_asked(toy, watched):
    """With no guard (the copy is called straight away) and under one (inside `explicit()`)."""
    x = _Block(_Place("cpu", 0), [1.0])
    guard = ds.transfer_guard("disallow") if watched else ds.transfer_guard("allow")
    with guard:
        for _ in range(2):  # the first call learns the class; the second is the lone tensor's fast path
            ds.to_device(x, "gpu:0")
            ds.to_device(x, "gpu:1", non_blocking=True)
            ds.copy_if_needed(x, "gpu:0", non_blocking=True)
            ds.copy_if_needed(x, "gpu:1")
    expected = [(x, _Place("gpu", 0), False), (x, _Place("gpu", 1), True), (x, _Place("gpu", 0), True),
                (x, _Place("gpu", 1), False)]
    assert toy.copies == expected * 2


# ------------------------------------------------------------------ torch


def _recording_class(torch):
    class Recording(torch.Tensor):
        """A tensor that records the keyword arguments of each `Tensor.to`, and can fail it as a
        device out of memory would."""

        calls: list = []
        out_of_memory = False

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.Tensor.to:
                cls.calls.append(dict(kwargs))
                if cls.out_of_memory:
                    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB")
            return super().__torch_function__(func, types, args, kwargs)

    return Recording


def test_torch_is_asked_for_a_non_blocking_copy_when_the_caller_asks(torch):
    recording = _recording_class(torch)
    x = torch.ones(3).as_subclass(recording)
    ds.to_device(x, "cpu", non_blocking=True)
    ds.to_device(x, "cpu")
    assert recording.calls == [{"non_blocking": True, "copy": True}, {"non_blocking": False, "copy": True}]


@pytest.mark.parametrize("call", ["copy_if_needed", "to_device"])
def test_an_out_of_memory_copy_names_the_call_that_made_it(torch, call):
    """To meta (a place the CPU tensor is not, on any machine), failing as out of memory."""
    recording = _recording_class(torch)
    x = torch.ones(3).as_subclass(recording)
    recording.out_of_memory = True
    for _ in range(2):  # the first call learns the class; the second is the lone tensor's fast path
        with pytest.raises(ds.DeviceOutOfMemoryError) as raised:
            getattr(ds, call)(x, "meta")
        assert str(raised.value).startswith(f"ds.{call}: meta:0 out of memory. It asked for 12 B;")


def test_a_meta_tensor_copied_to_the_cpu_has_no_data_to_copy(torch):
    x = torch.ones(2, device="meta")
    with pytest.raises(ds.DatalessTensorError) as raised:
        ds.to_device(x, "cpu")
    assert str(raised.value) == (
        "This tensor lives on meta:0, torch's device for shapes without data, so there is nothing to copy it to "
        "cpu. Create it on a real device (ds.cpu(), ds.try_gpu()), or materialise a meta module with "
        "module.to_empty(device=...) and load its weights.")
    assert ds.to_device(x, "meta").device.type == "meta"  # meta to meta: a copy of no data, allowed

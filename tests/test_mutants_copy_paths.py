"""The copy paths below `ds.to_device`, `ds.copy_if_needed`, `ds.to_numpy` and `ds.convert`: what
they promise that the mutation env (`tox -e mutation`, tools/mutation.py, area "copy paths") found
no test holding them to.

- torch's special tensors (nested, quantized, opaque layouts) that cannot be copied to a device:
  the error names the kind (and the dtype, without "torch.") and says what to do instead.
- `ds.convert`'s device crossings as the transfer guard sees them (`devshim.transfer.crossing`):
  direction, what was called, from where to where, explicit or not, and the error it refuses with.
- The nest walk (`devshim.backends.nests`): which framework resolves a target when no tensor says
  (a framework's own device object is its framework's, a spec string or a `ds.Device` the
  selected backend's), objects with a `.to` method (given the resolved device, and
  `non_blocking` as asked), a device checked when the nest holds no tensor, new containers from
  `to_device` and `to_numpy`, the target resolved once per framework met, a walk that counts
  as one explicit transfer for the guard, and `nest_to_numpy` naming `to_numpy` by default.
- The backend contract's own `same_place` and `copy_if_needed` (`devshim.backends.Backend`), which
  every backend of the mutation env overrides or bypasses: a toy framework here keeps the
  base's, as MXNet and the array-API plugin do.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

import devshim as ds
from devshim import backends, settings, transfer
from devshim._device import Device
from devshim.backends.nests import nest_to_numpy


@pytest.fixture(name="torch")
def torch_fixture():
    """torch, imported by the tests that need it (not at import: collecting this file leaves
    the frameworks devshim meets, and so the mutation env's test choice, as they were)."""
    return pytest.importorskip("torch")


class _Recorder:
    """No tensor, but has a `.to` method (a batch object, a module): records how it is called."""

    def __init__(self, non_blocking_ok: bool = True) -> None:
        self.calls: list = []
        self.explicit: list = []  # transfer.is_explicit() at each call
        self.non_blocking_ok = non_blocking_ok

    def to(self, device, **kwargs):
        if kwargs and not self.non_blocking_ok:
            raise TypeError("to() got an unexpected keyword argument 'non_blocking'")
        self.calls.append((device, kwargs))
        self.explicit.append(transfer.is_explicit())
        return self


# ------------------------------------------------------------------ torch's special tensors


def _refusal(x, spec) -> str:
    with pytest.raises(ds.UnsupportedValueError) as info:
        ds.to_device(x, spec)
    return str(info.value)


def test_a_nested_tensor_that_cannot_reach_a_device_is_refused_with_how_to_copy_its_parts(torch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "nested tensors are a prototype"
        x = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    message = _refusal(x, "meta")
    assert message == (
        "torch cannot copy a nested tensor to meta (its kernels for that device do not take one; devshim's "
        "virtual GPUs hold dense tensors only). Copy its parts: [ds.to_device(t, device) for t in x.unbind()], "
        "or pad it first with x.to_padded_tensor(0.0).")
    with pytest.raises(ds.UnsupportedValueError) as info:
        ds.copy_if_needed([x], "meta")
    assert str(info.value) == message


@pytest.mark.parametrize("dtype", ["quint8", "qint8"])
def test_a_quantized_tensor_that_cannot_reach_a_device_names_its_dtype_and_how_to_dequantize(torch, dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "quantized tensors are deprecated"
        x = torch.quantize_per_tensor(torch.ones(3), 0.1, 0, getattr(torch, dtype))
    assert _refusal(x, "meta") == (
        f"torch cannot copy a quantized tensor ({dtype}) to meta (its kernels for that device do not take "
        f"one; devshim's virtual GPUs hold dense tensors only). Dequantize it first (x.dequantize()), or copy "
        f"the stored integers (x.int_repr()).")


def test_a_tensor_of_an_opaque_layout_names_its_layout_and_says_make_it_dense(torch):
    if not (hasattr(torch.Tensor, "to_mkldnn") and torch.backends.mkldnn.is_available()):
        pytest.skip("this torch build has no MKL-DNN tensors")
    x = torch.ones(2, 2).to_mkldnn()
    message = _refusal(x, "meta")
    assert message.startswith(f"torch cannot copy an MKL-DNN tensor ({x.layout}) to meta (its kernels")
    assert message.endswith(" Make it dense first: x.to_dense().")
    with pytest.raises(ds.UnsupportedValueError, match=r"NumPy arrays are dense, so an MKL-DNN tensor \("):
        ds.to_numpy(x)


def test_an_mkldnn_tensor_copied_on_its_own_cpu_is_a_new_mkldnn_tensor_of_the_same_values(torch):
    if not (hasattr(torch.Tensor, "to_mkldnn") and torch.backends.mkldnn.is_available()):
        pytest.skip("this torch build has no MKL-DNN tensors")
    x = torch.arange(4.0).reshape(2, 2).to_mkldnn()
    y = ds.to_device(x, "cpu")  # torch's Tensor.to(copy=True) refuses this layout; clone copies it
    assert y is not x and y.layout == x.layout and torch.equal(y.to_dense(), x.to_dense())
    y.zero_()  # in place on the copy: the source keeps its values
    assert torch.equal(x.to_dense(), torch.arange(4.0).reshape(2, 2))


# ------------------------------------------------------------------ ds.convert's crossings


@pytest.fixture
def on_gpu0(torch, vgpu):
    """A float32 torch tensor on virtual gpu:0."""
    return ds.to_device(torch.arange(3, dtype=torch.float32), "gpu:0")


def test_a_conversion_leaving_the_device_unasked_is_refused_with_its_own_error(on_gpu0):
    with ds.transfer_guard("disallow") as report:
        with pytest.raises(ds.CrossDeviceConversionError) as info:
            ds.convert(on_gpu0, "numpy")
    assert str(info.value).startswith(
        "ds.convert(x, 'numpy') would copy x from gpu:0 to cpu:0: NumPy has no array on gpu:0. Make the copy "
        "explicit with ds.convert(x, 'numpy', device='cpu:0'), or allow it with ds.transfer_guard(")
    (event,) = report.events
    assert (event.kind, event.direction, event.what, str(event.source), str(event.target), event.action) == (
        "device-to-host read", "device_to_host", "ds.convert(x, 'numpy')", "gpu:0", "cpu:0", "refused")
    assert report.counts["device-to-host read"] == report.total == 1 and report.explicit == []


def test_a_conversion_leaving_the_device_unasked_is_logged_as_a_read(on_gpu0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ds.ImplicitTransferWarning)
        with ds.transfer_guard("log") as report:
            y = ds.convert(on_gpu0, "numpy")
    assert y.tolist() == [0.0, 1.0, 2.0]
    (event,) = report.events
    assert (event.kind, event.direction, event.what, str(event.source), str(event.target), event.action) == (
        "device-to-host read", "device_to_host", "ds.convert(x, 'numpy')", "gpu:0", "cpu:0", "logged")


def test_a_conversion_naming_its_device_is_an_explicit_crossing_the_guard_counts(on_gpu0):
    with ds.transfer_guard("disallow") as report:
        y = ds.convert(on_gpu0, "numpy", device="cpu")
    assert y.tolist() == [0.0, 1.0, 2.0] and report.total == 0
    (event,) = report.explicit
    assert (event.kind, event.direction, event.what, str(event.source), str(event.target), event.action) == (
        "explicit conversion", "device_to_host", "ds.convert(x, 'numpy', device='cpu:0')", "gpu:0", "cpu:0",
        "explicit")


# ------------------------------------------------------------------ objects with a .to method


def test_an_object_with_a_to_method_gets_the_resolved_device_and_non_blocking_as_asked(torch):
    with ds.use_backend("torch"):
        cpu = ds.get_backend("torch").target("cpu")
        for copy in (ds.to_device, ds.copy_if_needed):
            rec = _Recorder()
            assert copy([rec], "cpu", non_blocking=True)[0] is rec
            assert rec.calls == [(cpu, {"non_blocking": True})], copy.__name__
            rec = _Recorder()
            assert copy({"r": rec}, "cpu")["r"] is rec
            assert rec.calls == [(cpu, {})], copy.__name__


def test_an_object_whose_to_takes_no_non_blocking_is_moved_all_the_same(torch):
    with ds.use_backend("torch"):
        cpu = ds.get_backend("torch").target("cpu")
        rec = _Recorder(non_blocking_ok=False)
        assert ds.copy_if_needed(rec, "cpu", non_blocking=True) is rec
        assert rec.calls == [(cpu, {})]


def test_a_frameworks_own_device_object_is_resolved_by_that_framework_for_an_object_with_to(torch):
    # Under the numpy backend, torch.device("cpu") is torch's: the object gets it as it is (NumPy
    # would make it a Landing, its way of holding another framework's device).
    with ds.use_backend("numpy"):
        for copy in (ds.to_device, ds.copy_if_needed):
            rec = _Recorder()
            copy(rec, torch.device("cpu"))
            assert rec.calls == [(torch.device("cpu"), {})], copy.__name__


def test_a_ds_device_is_resolved_by_the_selected_backend_for_an_object_with_to(torch):
    # A ds.Device is the selected backend's to resolve, whichever framework it was read from:
    # NumPy makes torch's a Landing (where an array becomes a torch tensor), torch makes NumPy's
    # CPU its own.
    with ds.use_backend("numpy"):
        rec = _Recorder()
        ds.to_device(rec, ds.neutral_device(torch.ones(1)))
        assert [repr(device) for device, _ in rec.calls] == ["Landing(torch, device(type='cpu'))"]
    with ds.use_backend("torch"):
        rec = _Recorder()
        ds.to_device(rec, ds.Device("cpu", 0, backend="numpy"))
        assert rec.calls == [(torch.device("cpu"), {})]


def test_the_inputs_of_a_split_models_block_are_moved_without_non_blocking(torch, vgpu):
    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

        def forward(self, x, extra):
            return self.lin(x)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(2, 2)
            self.b = Head()

        def forward(self, x, extra):
            return self.b(self.a(x), extra)

    net = ds.place_model(Net(), {"a": "gpu:0", "b": "gpu:1"})
    try:
        rec = _Recorder()
        out = net(ds.to_device(torch.ones(1, 2), "gpu:0"), rec)
        assert str(ds.neutral_device(out)) == "gpu:1"
        assert rec.calls == [(ds.device("gpu:1"), {})]
    finally:
        ds.unplace(net)


# ------------------------------------------------------------------ where no tensor says


def test_a_nest_without_tensors_still_has_its_device_checked(torch):
    with ds.use_backend("torch"):
        for copy in (ds.to_device, ds.copy_if_needed):
            with pytest.raises(ds.InvalidDeviceError, match="^Cannot read device specification 'nonsense'"):
                copy([], "nonsense")
            with pytest.raises(ds.InvalidDeviceError, match=r"^Cannot use 3\.5 \(float\) as a device"):
                copy({"n": 1}, 3.5)


def test_a_tensor_whose_framework_is_not_selected_is_copied_by_its_own_framework(torch):
    t = torch.ones(2)
    with ds.use_backend("numpy"):
        kept = [t]
        assert ds.copy_if_needed(kept, "cpu") is kept
        moved = ds.copy_if_needed([t], "meta")
        assert type(moved) is list and moved[0].device == torch.device("meta")
        assert ds.to_device({"t": t}, "meta")["t"].device == torch.device("meta")


# ------------------------------------------------------------------ containers


def test_to_device_and_to_numpy_give_new_containers_even_where_no_tensor_changed_them(torch):
    inner, ids = [], {"n": 1}
    nest = {"x": torch.ones(2), "inner": inner, "ids": ids}
    with ds.use_backend("torch"):
        moved = ds.to_device(nest, "cpu")
        assert moved == {"x": moved["x"], "inner": [], "ids": {"n": 1}} and moved["x"] is not nest["x"]
        assert moved["inner"] is not inner and moved["ids"] is not ids
        assert ds.to_device(inner, "cpu") is not inner
        skipped = ds.to_device(nest, "cpu", skip_keys="x")
        assert skipped["x"] is nest["x"] and skipped is not nest
        host = ds.to_numpy(nest)
        assert isinstance(host["x"], np.ndarray) and host["inner"] is not inner and host["ids"] is not ids
        assert ds.to_numpy(inner) == [] and ds.to_numpy(inner) is not inner
        assert ds.to_numpy(ids) == ids and ds.to_numpy(ids) is not ids
        # copy_if_needed keeps what it did not have to copy: the same containers
        assert ds.copy_if_needed(nest, "cpu") is nest


def test_nest_to_numpy_called_alone_names_to_numpy_when_refusing_a_value_that_is_no_tensor():
    for value in (3, "a"):
        with pytest.raises(ds.NotATensorError) as info:
            nest_to_numpy(value)
        assert str(info.value).startswith("to_numpy() expects a tensor of an installed framework")
        assert f"but got builtins.{type(value).__name__}." in str(info.value)
    assert nest_to_numpy([3]) == [3]  # in a nest, what is no tensor is kept as it is


# ------------------------------------------------------------------ resolved once, one transfer


def test_the_target_is_resolved_once_per_framework_met_in_a_nest(torch, monkeypatch):
    adapter = ds.get_backend("torch")
    asked = []
    resolve = adapter.target

    def counting(spec):
        asked.append(spec)
        return resolve(spec)

    monkeypatch.setattr(adapter, "target", counting)
    nest = [torch.ones(1), torch.nn.Parameter(torch.ones(1)), torch.ones(2)]  # two tensor classes
    for copy in (ds.to_device, ds.copy_if_needed):
        asked.clear()
        copy(nest, "meta")
        assert asked == ["meta"], copy.__name__


def test_a_nest_walk_is_one_explicit_transfer_while_a_guard_watches(torch):
    rec = _Recorder()
    with ds.use_backend("torch"):
        with ds.transfer_guard("disallow"):
            ds.to_device([rec], "cpu")
            ds.copy_if_needed((rec,), "cpu")
        assert rec.explicit == [True, True]
        assert not transfer.is_explicit()


# ------------------------------------------------------------------ the backend contract's own


@dataclasses.dataclass(frozen=True)
class _Where:
    """A toy framework's device object."""

    kind: str
    index: int


class _ToyArray:
    def __init__(self, where: _Where, values) -> None:
        self.where = where
        self.values = np.asarray(values, dtype=np.float32)


class _ToyCopies(backends.Backend):
    """A framework that keeps the contract's own `same_place` and `copy_if_needed`, and records
    its copies."""

    spec = backends.BackendSpec("toycopies", import_name=__name__, title="A toy copying framework")

    def __init__(self) -> None:
        super().__init__()
        self.copies: list = []

    def is_tensor(self, x):
        return isinstance(x, _ToyArray)

    def is_native_device(self, obj):
        return isinstance(obj, _Where)

    def accelerator_count(self):
        return 2

    def make_native_device(self, kind, index):
        return _Where(kind, index)

    def describe(self, native):
        return Device(native.kind, native.index, native=native, backend=self.spec.name)

    def tensor_device(self, x):
        return self.describe(x.where)

    def copy_to(self, x, native, non_blocking):
        self.copies.append((x, native, non_blocking))
        return _ToyArray(native, x.values.copy())

    def tensor_to_numpy(self, x):
        return x.values.copy()


@pytest.fixture
def toy(setenv):
    setenv(settings.VIRTUAL_DEVICES_VAR, None)
    backends.register_backend(_ToyCopies.spec, _ToyCopies)
    try:
        yield backends.get_backend(_ToyCopies.spec.name)
    finally:
        backends.unregister_backend(_ToyCopies.spec.name)


def test_same_place_of_the_contract_is_device_equality(toy):
    x = _ToyArray(_Where("gpu", 1), [1.0])
    assert toy.same_place(x, _Where("gpu", 1))
    assert not toy.same_place(x, _Where("gpu", 0))
    assert not toy.same_place(x, _Where("cpu", 0))


def test_copy_if_needed_of_the_contract_keeps_a_tensor_already_there_and_else_copies_blocking(toy):
    x = _ToyArray(_Where("gpu", 1), [1.0, 2.0])
    assert toy.copy_if_needed(x, _Where("gpu", 1)) is x
    assert toy.copies == []
    y = toy.copy_if_needed(x, _Where("gpu", 0))
    assert y.where == _Where("gpu", 0) and y.values.tolist() == [1.0, 2.0]
    assert toy.copies == [(x, _Where("gpu", 0), False)]


def test_the_public_copies_of_a_framework_with_the_contracts_same_place(toy):
    x = _ToyArray(_Where("gpu", 1), [3.0])
    assert ds.copy_if_needed(x, "gpu:1") is x
    nest = {"x": x}
    assert ds.copy_if_needed(nest, "gpu:1") is nest
    assert toy.copies == []
    moved = ds.copy_if_needed(nest, "gpu:0")
    assert moved["x"].where == _Where("gpu", 0) and moved["x"].values.tolist() == [3.0]
    assert ds.copy_if_needed(x, "cpu").where == _Where("cpu", 0)
    assert [native for _, native, _ in toy.copies] == [_Where("gpu", 0), _Where("cpu", 0)]


def test_a_device_object_of_a_framework_not_selected_is_checked_by_its_framework(torch, toy):
    # Under torch, the toy's own device object is the toy's to resolve, for an empty nest (checked)
    # and for an object with a .to method (given it as it is).
    with ds.use_backend("torch"):
        assert ds.to_device([], _Where("gpu", 1)) == []
        assert ds.copy_if_needed({}, _Where("gpu", 1)) == {}
        rec = _Recorder()
        ds.to_device(rec, _Where("gpu", 1))
        assert rec.calls == [(_Where("gpu", 1), {})]
        with pytest.raises(ds.DeviceUnavailableError):
            ds.to_device([], _Where("gpu", 5))

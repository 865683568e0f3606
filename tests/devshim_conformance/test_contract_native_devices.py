"""Conformance: what ``ds.device_of(x)`` returns goes back wherever x's framework takes a device,
and into the namespace ``ds.array_module(x)`` returns (Chainer-style generic code), on the CPU
and on every GPU the backend has (virtual ones in each tox env's second pass)."""

from __future__ import annotations

import pytest

import devshim as ds


def _places():
    """Every device of the selected backend: the CPU, then each GPU (virtual or real)."""
    return ds.devices()


def _in_namespace(harness, xp, device, make):
    """``make(**kw)`` with the device passed the namespace's way (a keyword, or a device scope)."""
    keyword = harness.namespace_device_keyword
    if keyword is None:
        return harness.run_on(device, make)
    return make(**{keyword: device})


def test_device_of_goes_back_into_the_frameworks_own_calls(harness):
    for place in _places():
        x = harness.tensor([1.0, 2.0], device=place)
        d = ds.device_of(x)
        for how, make in harness.placements(d):
            y = make()
            assert ds.neutral_device(y) == ds.neutral_device(x), f"{how} with d = ds.device_of(x) on {place}"
            assert ds.device_of(y) == d, how


def _made_by_the_namespace(harness, x):
    xp = ds.array_module(x)
    d = ds.device_of(x)
    # MXNet 1.9's NumPy front-end spells asarray `array` (it has no asarray).
    asarray = getattr(xp, "asarray", None) or xp.array
    return {
        "xp.zeros(3, device=d)": _in_namespace(harness, xp, d, lambda **kw: xp.zeros(3, **kw)),
        "xp.asarray([4.0, 5.0], device=d)": _in_namespace(harness, xp, d, lambda **kw: asarray([4.0, 5.0], **kw)),
        "xp.asarray(x, device=d)": _in_namespace(harness, xp, d, lambda **kw: asarray(x, **kw)),
        "xp.ones_like(x, device=d)": _in_namespace(harness, xp, d, lambda **kw: xp.ones_like(x, **kw)),
    }


def test_device_of_goes_into_the_array_modules_creation_functions(harness):
    for place in _places():
        x = harness.tensor([1.0, 2.0], device=place)
        try:
            made = _made_by_the_namespace(harness, x)
        except ds.UnsupportedValueError as err:  # a framework without an array module says so
            pytest.skip(str(err))
        for how, y in made.items():
            assert ds.neutral_device(y) == ds.neutral_device(x), f"{how} on {place}"
        assert harness.values(made["xp.asarray([4.0, 5.0], device=d)"]).tolist() == [4.0, 5.0]
        assert harness.values(made["xp.ones_like(x, device=d)"]).tolist() == [1.0, 1.0]


def test_device_of_compares_with_devshims_devices_and_its_own_kind(harness):
    for place in _places():
        x = harness.tensor([1.0], device=place)
        y = harness.tensor([2.0], device=place)
        d, neutral = ds.device_of(x), ds.neutral_device(x)
        # The ds.Device on the left always answers (MXNet's Context.__eq__ says False to strangers).
        assert neutral == d and not neutral != d
        assert ds.Device(neutral.kind, neutral.index, virtual=neutral.virtual) == d
        assert ds.device_of(y) == d and hash(ds.device_of(y)) == hash(d)  # a dict key per place
        assert {d: "here"}[ds.device_of(y)] == "here"
        # It is the backend's native device: ds.device and the copy functions take it as it is.
        assert ds.device(d) == d and ds.neutral_device(ds.to_device(x, d)) == neutral
        assert ds.copy_if_needed(x, d) is x


def test_device_of_is_what_the_backend_calls_that_place(harness):
    assert ds.device_of(harness.tensor([1.0], device=ds.cpu())) == ds.cpu()
    if ds.num_gpus():
        on_gpu = harness.tensor([1.0], device=ds.gpu(0))
        assert ds.device_of(on_gpu) == ds.gpu(0) and ds.neutral_device(on_gpu) == "gpu:0"


@pytest.mark.parametrize("value", [[1.0], "cpu", None, 3])
def test_device_of_and_neutral_device_refuse_non_tensors(harness, value):
    for function in (ds.device_of, ds.neutral_device):
        with pytest.raises(ds.NotATensorError, match=function.__name__):
            function(value)


def test_to_device_onto_each_device_lands_where_device_of_then_says(harness):
    x = harness.tensor([1.0, 2.0, 3.0])  # on the framework's default device
    for place in _places():
        y = ds.to_device(x, place)
        assert y is not x and ds.device_of(y) == place, f"to_device(x, {place!r})"
        assert harness.values(y).tolist() == [1.0, 2.0, 3.0]
        z = ds.to_device(y, ds.device_of(y))  # to its own device: an equal array, still a copy
        assert z is not y and ds.device_of(z) == ds.device_of(y) and harness.values(z).tolist() == [1.0, 2.0, 3.0]


def test_to_device_cpu_brings_the_values_home_from_every_device(harness):
    expected = [1, 2, 3]
    for place in _places():
        x = harness.tensor(expected, device=place, dtype="int32")
        for spec in ("cpu", ds.cpu()):
            home = ds.to_device(x, spec)
            assert ds.device_of(home) == ds.cpu() and ds.neutral_device(home) == "cpu:0"
            assert harness.values(home).tolist() == expected and harness.dtype_name(home) == "int32"


def _devices_the_api_hands_back(harness) -> dict:
    """Every public function that returns a device, asked on this backend: name -> device."""
    x, y = harness.tensor([1.0]), harness.tensor([2.0])
    found = {"ds.cpu()": ds.cpu(), "ds.try_gpu()": ds.try_gpu(), "ds.try_gpu(1)": ds.try_gpu(1),
             "ds.device('cpu')": ds.device("cpu"), "ds.device_of(x)": ds.device_of(x),
             "ds.ensure_same_device(x, y)": ds.ensure_same_device(x, {"y": [y]}),
             "ds.process_info().device": ds.process_info().device}
    found.update({f"ds.devices()[{i}]": d for i, d in enumerate(ds.devices())})
    found.update({f"ds.try_all_gpus()[{i}]": d for i, d in enumerate(ds.try_all_gpus())})
    if ds.num_gpus():
        found["ds.gpu(0)"] = ds.gpu(0)
    if ds.get_backend().spec.has_module("model"):
        net = harness.mlp()
        found["ds.model_device(net)"] = ds.model_device(net)
        found.update({f"ds.model_devices(net) item {i}": d for i, d in enumerate(ds.model_devices(net))})
    return found


def test_every_device_devshim_hands_back_is_the_frameworks_own_and_goes_into_its_calls(harness):
    """Issue 35's audit: whatever public function returns a device returns the framework's own
    device object (ds.neutral_device alone returns a ds.Device), on a CPU box, on virtual GPUs
    and on a real GPU alike."""
    for how, device in _devices_the_api_hands_back(harness).items():
        assert not isinstance(device, ds.Device), f"{how} is a ds.Device: {device!r}"
        if harness.name != "numpy":  # NumPy's device is the string "cpu"
            assert ds.backends.describe_native_device(device).backend == harness.name, how
        made = harness.tensor([3.0], device=device)
        assert ds.device_of(made) == device, how
        assert ds.neutral_device(made) == (device if harness.name == "numpy" else ds.neutral_device(device)), how

"""Conformance (issue 19): nothing lost, nothing silent, on every backend.

allreduce never hands back an input (one tensor, one device included) and never
broadcasts; misuse of the placement helpers and of device specs gets a named
devshim error that says what to do; a failed place_model leaves the model as it
was. Runs in both tox passes (plain, and with virtual GPUs).
"""

from __future__ import annotations

import numpy as np
import pytest

import devshim as ds

ACTIONS = ("use ", "write ", "pass ", "set ", "call ", "give ", "convert", "copy ", "make ", "ask ",
           "take ", "keep ", "install", "accepted forms", "put ", "split ", "dequantize", "stack ")


def says_what_to_do(err: BaseException) -> bool:
    """A devshim message names an action: "Use ...", "Write ...", "Pass ...", and so on."""
    text = str(err).lower()
    return len(text) > 40 and any(word in text for word in ACTIONS)


def _values(harness, x) -> np.ndarray:
    return np.asarray(harness.values(x), dtype=np.float64)


# ------------------------------------------------------------------ allreduce


def test_allreduce_of_one_tensor_is_a_new_tensor_on_every_device(harness):
    for device in ds.devices():
        g = harness.tensor([1.0, 2.0, 3.0], device=device)
        (total,) = ds.allreduce([g])
        assert total is not g
        assert not harness.aliases(total, g)
        assert ds.device_of(total) == ds.device_of(g)
        np.testing.assert_array_equal(_values(harness, total), [1.0, 2.0, 3.0])
        if harness.mutable:
            harness.fill(total, 7.0)  # an in-place update of the result...
            np.testing.assert_array_equal(_values(harness, g), [1.0, 2.0, 3.0])  # ...leaves g alone


def test_allreduce_results_never_share_memory_with_the_inputs(harness):
    devices = ds.devices()
    inputs = [harness.tensor([float(i), 1.0], device=devices[i % len(devices)]) for i in range(3)]
    before = [_values(harness, g).copy() for g in inputs]
    results = ds.allreduce(inputs)
    assert len(results) == 3
    for g, total in zip(inputs, results):
        assert ds.device_of(total) == ds.device_of(g)
        np.testing.assert_array_equal(_values(harness, total), [3.0, 3.0])
        for other in inputs:
            assert not harness.aliases(total, other)
    for a, b in zip(results, results[1:]):
        assert not harness.aliases(a, b)
    if harness.mutable:
        harness.fill(results[0], -1.0)
        for g, values in zip(inputs, before):
            np.testing.assert_array_equal(_values(harness, g), values)
        np.testing.assert_array_equal(_values(harness, results[1]), [3.0, 3.0])


def test_allreduce_refuses_shapes_that_differ_instead_of_broadcasting(harness):
    a = harness.tensor([[1.0], [2.0], [3.0]])
    b = harness.tensor([1.0, 2.0, 3.0])
    with pytest.raises(ds.ReduceMismatchError) as info:
        ds.allreduce([a, b])
    message = str(info.value)
    assert "(3, 1)" in message and "(3,)" in message and "shapes" in message
    assert isinstance(info.value, ValueError) and says_what_to_do(info.value)


def test_allreduce_refuses_dtypes_that_differ(harness):
    a = harness.tensor([1.0, 2.0], dtype="float32")
    b = harness.tensor([1, 2], dtype="int32")
    with pytest.raises(ds.ReduceMismatchError, match="dtypes differ") as info:
        ds.allreduce([a, b])
    assert "float32" in str(info.value) and "int32" in str(info.value)


def test_allreduce_of_nothing_or_not_a_list_is_a_named_error(harness):
    with pytest.raises(ds.NotATensorError, match="empty list") as info:
        ds.allreduce([])
    assert says_what_to_do(info.value)
    g = harness.tensor([1.0, 2.0])
    with pytest.raises(ds.NotATensorError, match=r"ds.allreduce\(\[g\]\)"):
        ds.allreduce(g)  # a tensor where a list belongs: its rows must not be summed
    with pytest.raises(ds.NotATensorError):
        ds.allreduce([g, "not a tensor"])


def test_allreduce_of_two_frameworks_is_a_named_error(harness):
    if harness.name == "numpy":
        pytest.skip("the other framework here is NumPy itself")
    with pytest.raises(ds.MixedFrameworksError) as info:
        ds.allreduce([harness.tensor([1.0, 2.0]), np.ones(2, dtype=np.float32)])
    message = str(info.value)
    assert harness.name in message and "numpy" in message and "ds.convert" in message
    assert isinstance(info.value, TypeError)


# ------------------------------------------------------------------ split_batch


def test_split_batch_of_a_0d_tensor_is_a_named_error(harness):
    with pytest.raises(ds.BatchSplitError, match="0-d") as info:
        ds.split_batch(harness.tensor(1.0), [ds.cpu()])
    assert says_what_to_do(info.value)


def test_split_batch_refuses_a_single_spec_where_a_list_belongs(harness):
    X = harness.tensor([[1.0], [2.0], [3.0], [4.0]])
    for spec in ("cpu", ds.cpu()):
        with pytest.raises(ds.InvalidDeviceError, match="list of devices") as info:
            ds.split_batch(X, spec)
        assert says_what_to_do(info.value)
    with pytest.raises(ds.InvalidDeviceError, match="got a tensor"):
        ds.split_batch(X, X)  # split_batch(X, y) with the devices forgotten
    with pytest.raises(ds.InvalidDeviceError, match="at least one device"):
        ds.split_batch(X, [])


def test_split_batch_with_fewer_examples_than_devices_is_refused(harness):
    """The decision (docs/placement.md): refuse, rather than hand some device an empty shard."""
    devices = [ds.cpu()] * 3
    X = harness.tensor([[1.0], [2.0]])
    with pytest.raises(ds.BatchSplitError, match="2 examples for 3 devices") as info:
        ds.split_batch(X, devices)
    assert "devices[:2]" in str(info.value)


def test_split_batch_checks_every_device_before_copying(harness):
    X = harness.tensor([[1.0], [2.0]])
    with pytest.raises((ds.InvalidDeviceError, ds.DeviceUnavailableError)):
        ds.split_batch(X, [ds.cpu(), "gpu:99"])


# ------------------------------------------------------------------ devices


@pytest.mark.parametrize("spec", ["mps", "tpu:0", "xpu", "xpu:1"])
def test_a_platform_the_machine_lacks_is_refused_virtual_devices_or_not(harness, spec):
    platform = spec.partition(":")[0]
    if ds.get_backend().accelerator_platform() == platform:
        pytest.skip(f"this machine has {platform}")
    with pytest.raises(ds.DeviceUnavailableError) as info:
        ds.device(spec)
    assert platform in str(info.value) and says_what_to_do(info.value)


# ------------------------------------------------------------------ place_model


def test_a_failed_place_model_leaves_the_model_exactly_as_it_was(harness):
    net = harness.mlp()
    if net is None:
        pytest.skip(f"{harness.name} has no models")
    devices = ds.devices()
    before_values = harness.param_values(net)
    before_places = ds.model_devices(net)
    with pytest.raises(ds.DevshimError) as info:
        ds.place_model(net, {"0": devices[-1], "no_such_block": devices[0]})
    assert isinstance(info.value, (ds.UnknownSubmoduleError, ds.UnsupportedPlacementError))
    assert says_what_to_do(info.value)
    assert ds.model_devices(net) == before_places
    for a, b in zip(before_values, harness.param_values(net)):
        np.testing.assert_array_equal(a, b)
    if harness.name == "torch":
        assert "no_such_block" in str(info.value) and "'0'" in str(info.value)
        assert all(not m._forward_pre_hooks for m in net.modules())
    with pytest.raises((ds.UnknownSubmoduleError, ds.UnsupportedPlacementError)):
        ds.place_model(net, {0: devices[0]})  # a key that is no name
    assert ds.model_devices(net) == before_places


# ------------------------------------------------------------------ framework-specific aliasing


def test_allreduce_of_one_tf_variable_is_a_new_tensor_not_the_variable():
    tf = pytest.importorskip("tensorflow")
    v = tf.Variable([1.0, 2.0])
    (total,) = ds.allreduce([v])
    assert total is not v and not isinstance(total, tf.Variable)
    v.assign_add([10.0, 10.0])  # the caller's variable changes; the sum taken before does not
    np.testing.assert_array_equal(total.numpy(), [1.0, 2.0])


def test_donating_allreduce_results_to_jax_leaves_the_inputs_alive():
    jax = pytest.importorskip("jax")
    ds.num_gpus(backend="jax")  # virtual devices before the first array
    for device in ds.devices(backend="jax"):
        g = jax.device_put(jax.numpy.arange(3.0), device)
        update = jax.jit(lambda a: a * 2, donate_argnums=0)
        (total,) = ds.allreduce([g])
        update(total)
        assert not g.is_deleted()
        np.testing.assert_array_equal(np.asarray(g), [0.0, 1.0, 2.0])
        if len(ds.devices(backend="jax")) > 1:
            a, b = ds.allreduce([g, jax.device_put(jax.numpy.ones(3), ds.devices(backend="jax")[-1])])
            update(a), update(b)
            assert not g.is_deleted()


def test_a_torch_place_model_that_fails_midway_is_rolled_back(monkeypatch):
    torch = pytest.importorskip("torch")
    devices = ds.devices(backend="torch")
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    ds.place_model(net, {"0": devices[0], "1": devices[0]})  # an earlier split: its hooks must stay
    hooks_before = [dict(m._forward_pre_hooks) for m in net]
    params_before = [p for p in net.parameters()]
    data_before = [(p.data_ptr(), p.device) for p in net.parameters()]
    values_before = [p.detach().cpu().clone() for p in net.parameters()]

    def broken_to(*args, **kwargs):
        raise RuntimeError("out of memory (simulated)")

    monkeypatch.setattr(net[1], "to", broken_to)
    with pytest.raises(RuntimeError, match="simulated"):
        ds.place_model(net, {"0": devices[-1], "1": devices[-1]})
    assert [p.device for p in net.parameters()] == [device for _, device in data_before]
    for p, values in zip(net.parameters(), values_before):
        assert torch.equal(p.detach().cpu(), values)
    if not ds.settings.virtual_device_count():
        # The same Parameter objects, holding the same memory. (Moving a virtual GPU's parameter
        # back to the CPU makes a new Parameter: torch cannot swap that pair in place.)
        assert [p for p in net.parameters()] == params_before
        assert [(p.data_ptr(), p.device) for p in net.parameters()] == data_before
    assert [dict(m._forward_pre_hooks) for m in net] == hooks_before


@pytest.mark.parametrize("make", ["sparse_coo", "sparse_csr", "nested", "quantized"])
def test_torch_tensors_numpy_cannot_hold_get_a_named_error_naming_the_reason(make):
    torch = pytest.importorskip("torch")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = {
            "sparse_coo": lambda: torch.eye(3).to_sparse(),
            "sparse_csr": lambda: torch.eye(3).to_sparse_csr(),
            "nested": lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
            "quantized": lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8),
        }[make]()
    reason = {"sparse_coo": "sparse", "sparse_csr": "sparse", "nested": "nested", "quantized": "qint8"}[make]
    with pytest.raises((ds.UnsupportedValueError, ds.UnsupportedDtypeError)) as info:
        ds.to_numpy(x)
    assert reason in str(info.value) and says_what_to_do(info.value)
    assert "float32 type" not in str(info.value)
    for device in ds.devices(backend="torch"):
        try:
            moved = ds.to_device(x, device)
        except ds.UnsupportedValueError as err:  # a virtual GPU holds dense tensors only
            assert says_what_to_do(err)
        else:
            assert moved is not x and ds.device_of(moved) == ds.device_of(ds.to_device(torch.ones(1), device))


@pytest.mark.parametrize("make", ["deleted", "typed key"])
def test_jax_values_numpy_cannot_read_get_a_named_error_naming_the_reason(make):
    jax = pytest.importorskip("jax")
    ds.num_gpus(backend="jax")
    if make == "deleted":
        x = jax.numpy.ones(3)
        x.delete()
        with pytest.raises(ds.DatalessTensorError, match="deleted"):
            ds.to_numpy(x)
        for device in ds.devices(backend="jax"):
            with pytest.raises(ds.DatalessTensorError, match="donate"):
                ds.to_device(x, device)
    else:
        keys = jax.random.split(jax.random.key(0), 2)
        with pytest.raises(ds.UnsupportedDtypeError, match="key_data"):
            ds.to_numpy(keys)
        for device in ds.devices(backend="jax"):
            moved = ds.to_device(keys, device)
            np.testing.assert_array_equal(np.asarray(jax.random.key_data(moved)),
                                          np.asarray(jax.random.key_data(keys)))

"""Conformance: placing models and the data-parallel helpers, on every backend with a model.py.

Tests that need two devices run on real or virtual GPUs (the virtual tox pass) and skip
with the reason elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

import devshim as ds

RNG = np.random.default_rng(1)
X = RNG.standard_normal((9, 4)).astype(np.float32)
Y = RNG.standard_normal((9, 3)).astype(np.float32)


@pytest.fixture
def mlp(harness):
    model = harness.mlp()
    if model is None:
        pytest.skip(f"{harness.name} has no models to place")
    return model


def values(harness, model):
    return harness.param_values(model)


def test_place_model_puts_every_parameter_on_the_device(harness, mlp):
    target = ds.try_gpu()
    placed = ds.place_model(mlp, target)
    where = ds.model_device(placed)
    # (the ds.Device on the left: MXNet's Context says False to anything that is no Context)
    assert ds.neutral_device(harness.tensor([0.0], device=target)) == where and where == ds.device(target)
    assert ds.model_devices(placed) == {ds.model_device(placed)}
    # the framework's own device object, as device_of's: it goes into the framework's calls
    assert ds.neutral_device(harness.tensor([0.0], device=where)) == ds.neutral_device(where) == ds.neutral_device(target)
    assert ds.backends.describe_native_device(where).backend == harness.name
    for a, b in zip(values(harness, placed), values(harness, harness.mlp())):
        np.testing.assert_array_equal(a, b)  # the weights came along


def test_place_model_on_each_of_two_devices(harness, mlp, two_devices):
    first, second = two_devices
    on_first = ds.place_model(mlp, first)
    before = values(harness, on_first)
    on_second = ds.place_model(on_first, second)
    assert ds.neutral_device(harness.tensor([0.0], device=second)) == ds.model_device(on_second)
    for a, b in zip(values(harness, on_second), before):
        np.testing.assert_array_equal(a, b)
    x = harness.tensor(X, device=second)
    out = harness.run_on(second, lambda: harness.forward(on_second, x))
    assert ds.neutral_device(out) == ds.neutral_device(x)


def test_placement_passes_a_disallowing_guard(harness, mlp, two_devices):
    first, second = two_devices
    # The data is made before the block: making an array from host data on a GPU is itself a
    # host-to-device transfer (JAX's guard, which the block sets, refuses it).
    x, y = harness.tensor(X), harness.tensor(Y)
    parts = [harness.tensor([1.0], device=first), harness.tensor([2.0], device=second)]
    with ds.transfer_guard("disallow") as report:
        placed = ds.place_model(mlp, second)
        replicas = ds.replicate(placed, [first, second])
        shards = ds.split_batch(x, y, [first, second])
        sums = ds.allreduce(parts)
    assert report.total == 0
    assert len(replicas) == 2 and len(shards[0]) == 2
    assert [ds.neutral_device(s) for s in sums] == [ds.neutral_device(harness.tensor([0.0], device=d)) for d in (first, second)]


def test_a_model_is_not_a_tensor_and_a_tensor_is_not_a_model(harness, mlp):
    with pytest.raises(ds.NotAModelError, match="not a model devshim can place"):
        ds.place_model(harness.tensor([1.0]), "cpu")
    with pytest.raises(ds.NotAModelError):
        ds.model_device([1, 2])


# ------------------------------------------------------------ data parallel


def test_split_batch_gives_the_first_shards_one_more_example(harness):
    devices = ds.try_all_gpus()
    x = harness.tensor(np.arange(9.0 * 2).reshape(9, 2))
    shards = ds.split_batch(x, devices)
    base, extra = divmod(9, len(devices))
    assert [harness.shape(s)[0] for s in shards] == [base + (1 if i < extra else 0) for i in range(len(devices))]
    np.testing.assert_array_equal(np.concatenate([harness.values(s) for s in shards]), harness.values(x))
    for shard, device in zip(shards, devices):
        assert ds.neutral_device(shard) == ds.neutral_device(harness.tensor([0.0], device=device))


def test_split_batch_of_nine_over_four_is_three_two_two_two(harness):
    x = harness.tensor(np.arange(9.0))
    y = harness.tensor(np.arange(9.0) * 10)
    xs, ys = ds.split_batch(x, y, [ds.cpu()] * 4)  # D2L's scatter would give 3, 3, 3, 0
    assert [harness.shape(s)[0] for s in xs] == [3, 2, 2, 2]
    np.testing.assert_array_equal(harness.values(ys[1]), [30.0, 40.0])


def test_split_batch_refuses_fewer_examples_than_devices(harness):
    with pytest.raises(ds.BatchSplitError, match="2 examples for 3 devices") as info:
        ds.split_batch(harness.tensor([1.0, 2.0]), [ds.cpu()] * 3)
    assert isinstance(info.value, ValueError)
    with pytest.raises(ds.BatchSplitError, match="same first dimension"):
        ds.split_batch(harness.tensor([1.0, 2.0]), harness.tensor([1.0]), [ds.cpu()])


def test_allreduce_gives_each_device_the_sum(harness, two_devices):
    first, second = two_devices
    a = harness.tensor([1.0, 2.0], device=first)
    b = harness.tensor([10.0, 20.0], device=second)
    total_a, total_b = ds.allreduce([a, b])
    for total, source in ((total_a, a), (total_b, b)):
        np.testing.assert_array_equal(harness.values(total), [11.0, 22.0])
        assert ds.neutral_device(total) == ds.neutral_device(source)
    np.testing.assert_array_equal(harness.values(a), [1.0, 2.0])  # inputs left as they were


def test_replicas_are_independent_with_equal_weights(harness, mlp, two_devices):
    replicas = ds.replicate(mlp, list(two_devices))
    assert [ds.neutral_device(harness.tensor([0.0], device=d)) for d in two_devices] == [
        ds.model_device(r) for r in replicas]
    for replica in replicas:
        for a, b in zip(values(harness, replica), values(harness, mlp)):
            np.testing.assert_array_equal(a, b)
    grads = harness.grads(replicas[0], *(harness.run_on(two_devices[0], lambda: (
        ds.to_device(harness.tensor(X), two_devices[0]), ds.to_device(harness.tensor(Y), two_devices[0])))))
    replicas[0] = harness.sgd_step(replicas[0], grads, 0.1) or replicas[0]
    assert not np.allclose(values(harness, replicas[0])[0], values(harness, replicas[1])[0])


def test_a_data_parallel_step_equals_the_single_device_step(harness, mlp, two_devices):
    """Replicate, split the batch, backward on each shard, allreduce, the same update: the
    weights equal one step on the whole batch on one device (the loss is a sum)."""
    devices = list(two_devices)
    reference = ds.replicate(mlp, [devices[0]])[0]
    x0, y0 = ds.to_device(harness.tensor(X), devices[0]), ds.to_device(harness.tensor(Y), devices[0])
    reference = harness.sgd_step(reference, harness.grads(reference, x0, y0), 0.01) or reference

    replicas = ds.replicate(mlp, devices)
    xs, ys = ds.split_batch(harness.tensor(X), harness.tensor(Y), devices)
    per_device = [harness.grads(r, x, y) for r, x, y in zip(replicas, xs, ys)]
    summed = [ds.allreduce(list(grads)) for grads in zip(*per_device)]  # per parameter
    replicas = [harness.sgd_step(replica, [total[i] for total in summed], 0.01) or replica
                for i, replica in enumerate(replicas)]
    for replica in replicas:
        for a, b in zip(values(harness, replica), values(harness, reference)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)

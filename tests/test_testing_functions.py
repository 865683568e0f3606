"""ds.testing's assert_allclose, numerical_grad and check_backward: what the conformance suite
(tests/conformance/test_contract_testing.py) does not cover per backend. The comparisons and the
argument checks, on NumPy values (every tox env has NumPy); then what is framework-specific:
torch's caller-facing behaviour, TensorFlow variables, JAX's immutable arrays, frameworks mixed."""

from __future__ import annotations

import collections
import dataclasses
import importlib.util

import numpy as np
import pytest

import devshim as ds

installed = {name: importlib.util.find_spec(name) is not None for name in ("torch", "tensorflow", "jax", "mxnet")}
Pair = collections.namedtuple("Pair", "weight bias")


@dataclasses.dataclass
class Step:
    loss: object
    grads: object


# ------------------------------------------------------------------ assert_allclose: values


@pytest.mark.parametrize("dtype, inside, outside", [
    ("float64", 5e-8, 5e-6), ("float32", 5e-6, 5e-4), ("float16", 1e-3, 1e-2),
])
def test_default_tolerances_follow_the_dtype(dtype, inside, outside):
    base = np.array([1.0, 2.0, 4.0], dtype=dtype)
    ds.testing.assert_allclose(base, (base.astype(np.float64) * (1 + inside)).astype(dtype))
    with pytest.raises(ds.NotCloseError, match=rf"\({dtype}'s defaults\)"):
        ds.testing.assert_allclose(base, (base.astype(np.float64) * (1 + outside)).astype(dtype))


def test_bfloat16_gets_the_loosest_float_tolerance():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    base = np.array([1.0, 2.0], dtype=ml_dtypes.bfloat16)
    ds.testing.assert_allclose(base, np.array([1.0078125, 2.0]))  # one unit in bfloat16's last place
    with pytest.raises(ds.NotCloseError, match=r"rtol=0\.016, atol=0\.001 \(bfloat16's defaults\)"):
        ds.testing.assert_allclose(base, np.array([1.05, 2.0]))


def test_a_given_tolerance_replaces_only_its_own_default():
    with pytest.raises(ds.NotCloseError, match=r"rtol=0\.1, atol=1e-06 \(atol: float32's default\)"):
        ds.testing.assert_allclose(np.float32([1.0]), np.float32([1.5]), rtol=0.1)
    with pytest.raises(ds.NotCloseError, match=r"rtol=1e-05, atol=0\.1 \(rtol: float32's default\)"):
        ds.testing.assert_allclose(np.float32([1.0]), np.float32([1.5]), atol=0.1)
    ds.testing.assert_allclose(np.float32([1.0]), np.float32([1.5]), rtol=0, atol=0.5)


def test_integers_compare_exactly_unless_given_a_tolerance():
    big = np.array([2 ** 62, 1], dtype=np.int64)
    with pytest.raises(ds.NotCloseError, match=r"rtol=0, atol=0 \(int64's defaults\)\nMismatched elements: 1 / 2"):
        ds.testing.assert_allclose(big, big + np.array([1, 0]))  # equal in float64, not in int64
    ds.testing.assert_allclose(np.array([1, 2]), np.array([1, 3]), atol=1)
    ds.testing.assert_allclose(np.array([True, False]), [True, False])


def test_nan_and_infinities():
    ds.testing.assert_allclose(np.array([np.nan, np.inf, -np.inf]), [np.nan, np.inf, -np.inf])
    with pytest.raises(ds.NotCloseError, match=r"Mismatched elements: 1 / 3"):
        ds.testing.assert_allclose(np.array([np.nan, np.inf, 1.0]), [np.nan, np.inf, 1.0], equal_nan=False)
    with pytest.raises(ds.NotCloseError, match=r"Greatest absolute difference: inf at index \(0,\) "
                                               r"\(actual inf, desired -inf\)"):
        ds.testing.assert_allclose(np.array([np.inf]), [-np.inf])


def test_the_greatest_absolute_and_relative_differences_can_be_at_different_places():
    with pytest.raises(ds.NotCloseError) as info:
        ds.testing.assert_allclose(np.array([[100.0, 0.5]]), np.array([[90.0, 0.1]]))
    message = str(info.value)
    assert "Greatest absolute difference: 10 at index (0, 0) (actual 100.0, desired 90.0)" in message
    assert "Greatest relative difference: 4 at index (0, 1) (actual 0.5, desired 0.1)" in message


def test_complex_values():
    ds.testing.assert_allclose(np.array([1 + 2j]), [1 + 2j])
    with pytest.raises(ds.NotCloseError, match=r"Greatest absolute difference: 1 at index \(0,\)"):
        ds.testing.assert_allclose(np.array([1 + 2j]), [1 + 3j])


# ------------------------------------------------------------------ assert_allclose: shapes and nests


def test_scalars_stand_for_any_shape_and_other_shapes_must_be_equal():
    ds.testing.assert_allclose(np.ones((2, 3)), 1.0)
    ds.testing.assert_allclose(np.float32(2.0), np.full((4,), 2.0))
    with pytest.raises(ds.NotCloseError, match=r"^Shapes differ: actual \(2, 3\), desired \(3,\)\.\n actual: numpy "
                                               r"float64 \(2, 3\) on cpu:0\n desired: numpy float64 \(3,\) on cpu:0"):
        ds.testing.assert_allclose(np.ones((2, 3)), np.ones(3))  # NumPy would broadcast it
    with pytest.raises(ds.NotCloseError, match=r"Shapes differ: actual \(1,\), desired \(\)"):
        ds.testing.assert_allclose(np.ones(1), np.array(1.0))  # a 0-d array is no scalar


def test_nests_of_one_structure_are_compared_leaf_by_leaf_and_each_failure_says_where():
    actual = {"step": Step(loss=np.float32(0.5), grads=Pair(np.ones(2), [0.0, 1.0])), "lr": 0.1}
    ds.testing.assert_allclose(actual, {"step": Step(0.5, Pair([1.0, 1.0], np.array([0.0, 1.0]))), "lr": 0.1})
    with pytest.raises(ds.NotCloseError) as info:
        ds.testing.assert_allclose(actual, {"step": Step(0.5, Pair([1.0, 2.0], [0.0, 1.0])), "lr": 0.2},
                                   err_msg="epoch 3")
    message = str(info.value)
    assert message.startswith("At ['step'].grads.weight: Not equal to tolerance")
    assert "\n\nAt ['lr']: Not equal to tolerance rtol=1e-07, atol=1e-09 (float64's defaults)\n" in message
    assert " actual: Python float () on the host\n desired: Python float () on the host" in message
    assert message.endswith("\nepoch 3")


def test_nests_of_different_structures_fail_saying_so():
    with pytest.raises(ds.NotCloseError, match=r"The nests differ in structure: actual has 2 leaves \(\[0\], \[1\]\), "
                                               r"desired has 3 leaves"):
        ds.testing.assert_allclose([np.ones(1), np.ones(1)], [np.ones(1), np.ones(1), np.ones(1)])
    with pytest.raises(ds.NotCloseError, match=r"actual has one value \(ndarray\), desired has 3 leaves"):
        ds.testing.assert_allclose(np.ones(2), [[1.0, 1.0], [1.0]])  # ragged: no one array


def test_values_that_are_no_numbers_are_refused():
    with pytest.raises(ds.NotATensorError, match=r"assert_allclose\(\) expects a tensor"):
        ds.testing.assert_allclose("1.0", 1.0)


# ------------------------------------------------------------------ numerical_grad on NumPy


def test_numerical_grad_in_chainers_form_changes_numpy_arrays_in_place_and_restores_them():
    x = np.array([[0.5, -1.0], [2.0, 0.25]], dtype=np.float32)
    before = x.copy()
    gy = np.array([[1.0, 2.0], [0.5, -1.0]], dtype=np.float32)
    gx, = ds.testing.numerical_grad(lambda: np.exp(x), (x,), (gy,))
    assert type(gx) is np.ndarray and gx.dtype == np.float32 and gx.shape == (2, 2)
    np.testing.assert_allclose(gx, gy * np.exp(before), rtol=1e-3)
    np.testing.assert_array_equal(x, before)


def test_numerical_grad_leaves_out_outputs_whose_grad_output_is_none():
    x = np.array([1.0, 2.0])
    gx, = ds.testing.numerical_grad(lambda x: (x * x, x * 100.0), (x,), (np.ones(2), None))
    np.testing.assert_allclose(gx, 2 * x, rtol=1e-8)


def test_numerical_grad_steps_by_what_the_dtype_can_hold():
    x = np.array([1.0, 3.0], dtype=np.float16)
    with pytest.raises(ds.GradientCheckUsageError, match=r"eps=0\.0001 does not change input 0 \(numpy float16 "
                                                         r"\(2,\) on cpu:0\) at index \(0,\).*eps=0\.00390625"):
        ds.testing.numerical_grad(lambda x: x * x, (x,), (np.ones(2),), eps=1e-4)
    gx, = ds.testing.numerical_grad(lambda x: x * x, (x,), (np.ones(2),), eps=2 ** -4)
    assert gx.dtype == np.float16
    np.testing.assert_allclose(gx.astype(np.float64), [2.0, 6.0], rtol=1e-2)


def test_numerical_grad_refuses_what_cannot_work():
    x = np.ones(3)
    with pytest.raises(ds.GradientCheckUsageError, match=r"input 0 is a numpy int64 \(3,\) on cpu:0 array: only "
                                                         r"floating-point inputs have a gradient"):
        ds.testing.numerical_grad(lambda i: i * 2.0, (np.arange(3),), (x,))
    with pytest.raises(ds.GradientCheckUsageError, match=r"input 1 is a builtins\.str, not a tensor"):
        ds.testing.numerical_grad(lambda x, s: x, (x, "label"), (x,))
    with pytest.raises(ds.GradientCheckUsageError, match=r"f returned 1 output, but grad_outputs has 2"):
        ds.testing.numerical_grad(lambda x: x, (x,), (x, x))
    with pytest.raises(ds.GradientCheckUsageError, match=r"grad_outputs 0 has shape \(2,\), but output 0 of f has "
                                                         r"shape \(3,\)"):
        ds.testing.numerical_grad(lambda x: x, (x,), (np.ones(2),))
    with pytest.raises(ds.GradientCheckUsageError, match=r"this f\(a, b\) takes neither"):
        ds.testing.numerical_grad(lambda a, b: a, (x,), (x,))
    with pytest.raises(ds.GradientCheckUsageError, match=r"got no inputs"):
        ds.testing.numerical_grad(lambda: x, (), (x,))
    frozen = np.ones(3)
    frozen.flags.writeable = False
    with pytest.raises(ds.ImmutableInputError, match=r"input 0 \(numpy float64 \(3,\) on cpu:0\) cannot be changed"):
        ds.testing.numerical_grad(lambda: frozen * 2, (frozen,), (x,))


def test_check_backward_refuses_numpy_saying_what_to_use():
    with pytest.raises(ds.NoAutodiffError) as info:
        ds.testing.check_backward(np.exp, (np.ones(3),))
    assert isinstance(info.value, TypeError)
    assert str(info.value).startswith("NumPy has no automatic differentiation, so check_backward() has no backward to "
                                      "check for NumPy arrays. Compare your own backward with the numbers instead: "
                                      "gx, = ds.testing.numerical_grad(f, (x,), (gy,))")


# ------------------------------------------------------------------ framework-specific


@pytest.mark.skipif(not installed["torch"], reason="torch is not installed in this environment")
def test_torch_check_backward_leaves_the_callers_tensors_alone_and_checks_float64_tightly():
    import torch

    x = torch.rand(3, 2, dtype=torch.float64, requires_grad=True)
    y = torch.rand(3, 2, dtype=torch.float64)
    ds.testing.check_backward(lambda x, y: torch.sin(x) * y, (x, y))
    assert x.grad is None and y.grad is None and not y.requires_grad
    # float64's default tolerances (rtol=1e-4) catch a backward that is off by 1%
    class Off(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.sin(x)

        @staticmethod
        def backward(ctx, gy):
            x, = ctx.saved_tensors
            return gy * torch.cos(x) * 1.01

    with pytest.raises(ds.GradientMismatchError, match=r"rtol=0\.0001, atol=1e-05"):
        ds.testing.check_backward(Off.apply, (x,))
    ds.testing.check_backward(Off.apply, (x,), rtol=0.02)


@pytest.mark.skipif(not installed["torch"], reason="torch is not installed in this environment")
def test_an_input_no_output_depends_on_has_a_zero_gradient():
    import torch

    x, y = torch.rand(3), torch.rand(3)
    ds.testing.check_backward(lambda x, y: x * 2, (x, y))
    with pytest.raises(ds.GradientMismatchError, match=r"The gradient of input 1 \(of 2"):
        ds.testing.check_backward(lambda x, y: x * 2 + y.detach(), (x, y))  # autograd cannot see y


@pytest.mark.skipif(not installed["torch"], reason="torch is not installed in this environment")
def test_check_backward_refuses_integer_inputs_and_inputs_of_several_frameworks():
    import torch

    with pytest.raises(ds.GradientCheckUsageError, match=r"input 1 is a torch int64 \(3,\) on cpu:0 array.*Close "
                                                         r"over it instead"):
        ds.testing.check_backward(lambda x, i: x[i], (torch.rand(3), torch.arange(3)))
    with pytest.raises(ds.MixedFrameworksError, match=r"inputs of several frameworks \(numpy, torch\)"):
        ds.testing.check_backward(lambda x, y: x * y, (torch.rand(3), np.ones(3)))


@pytest.mark.skipif(not installed["tensorflow"], reason="tensorflow is not installed in this environment")
def test_tensorflow_variables_can_be_changed_in_place_and_tensors_cannot():
    import tensorflow as tf

    variable = tf.Variable([0.5, 1.5])
    gx, = ds.testing.numerical_grad(lambda: variable * variable, (variable,), (np.ones(2),))
    np.testing.assert_allclose(ds.to_numpy(gx), [1.0, 3.0], rtol=1e-3)
    np.testing.assert_array_equal(variable.numpy(), np.float32([0.5, 1.5]))
    ds.testing.check_backward(lambda v: v * v, (variable,))
    tensor = tf.constant([0.5, 1.5])
    with pytest.raises(ds.ImmutableInputError, match=r"input 0 \(tensorflow float32 \(2,\) on cpu:0\)"):
        ds.testing.numerical_grad(lambda: tensor * tensor, (tensor,), (np.ones(2),))


@pytest.mark.skipif(not installed["jax"], reason="jax is not installed in this environment")
def test_jax_functions_with_several_outputs_in_a_dict():
    import jax.numpy as jnp

    x = jnp.array([0.5, 1.5], dtype=jnp.float32)
    ds.testing.check_backward(lambda x: {"square": x * x, "sine": jnp.sin(x)}, (x,))
    grads = ds.testing.numerical_grad(lambda x: {"square": x * x, "sine": jnp.sin(x)}, (x,),
                                      {"square": np.ones(2), "sine": None})
    ds.testing.assert_allclose(grads, (2 * x,), rtol=1e-3)
    ds.testing.check_backward(lambda x: {"square": x * x, "sine": jnp.sin(x)}, (x,),
                              {"sine": np.ones(2), "square": np.full(2, -1.0)})


@pytest.mark.skipif(not installed["jax"], reason="jax is not installed in this environment")
def test_a_jax_array_spread_over_devices_is_compared_and_described():
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    gpus = ds.try_all_gpus(backend="jax")
    if len(gpus) < 2:
        pytest.skip("needs two JAX devices: run with DEVSHIM_VIRTUAL_DEVICES=2 or more")
    mesh = Mesh(np.array(gpus[:2]), ("batch",))
    x = jax.device_put(np.arange(4.0, dtype=np.float32), NamedSharding(mesh, PartitionSpec("batch")))
    ds.testing.assert_allclose(x, np.arange(4.0))
    with pytest.raises(ds.NotCloseError, match=r" actual: jax float32 \(4,\) on several devices \(NamedSharding"):
        ds.testing.assert_allclose(x, np.zeros(4))

"""ds.testing's assert_allclose, numerical_grad and check_backward: what the conformance suite
(tests/devshim_conformance/test_contract_testing.py) does not cover per backend. The comparisons and the
argument checks, on NumPy values (every tox env has NumPy); then what is framework-specific:
torch's caller-facing behaviour, TensorFlow variables, JAX's immutable arrays, frameworks mixed."""

from __future__ import annotations

import collections
import dataclasses
import warnings

import numpy as np
import pytest

import devshim as ds

installed = {name: spec.is_installed() for name, spec in ds.backends.specs().items()}
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


@pytest.mark.parametrize("name, value", [("rtol", -1e-5), ("atol", -1e-6), ("rtol", float("nan")),
                                         ("atol", float("inf")), ("atol", "1e-6")])
def test_a_tolerance_that_cannot_work_is_refused_by_name(name, value):
    with pytest.raises(ds.ToleranceError, match=rf"assert_allclose\({name}=.*a tolerance is a finite number, 0 or more"):
        ds.testing.assert_allclose(np.float32([1.0]), np.float32([1.0]), **{name: value})
    assert issubclass(ds.ToleranceError, ValueError)


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


def test_mappings_match_by_key_in_any_order_and_integer_keys_are_no_list_positions():
    ds.testing.assert_allclose({"a": np.ones(2), "b": 2.0}, {"b": 2.0, "a": [1.0, 1.0]})
    ds.testing.assert_allclose({0: 1.0, 1: 2.0}, {1: 2.0, 0: 1.0})
    with pytest.raises(ds.NotCloseError, match=r"At \['b'\]: Not equal to tolerance"):
        ds.testing.assert_allclose({"a": 1.0, "b": 2.0}, {"b": 3.0, "a": 1.0})
    with pytest.raises(ds.NotCloseError, match=r"actual has a mapping there, desired a sequence"):
        ds.testing.assert_allclose({0: 1.0, 1: 2.0}, [1.0, 2.0])
    with pytest.raises(ds.NotCloseError, match=r"actual has a single value there, desired a mapping"):
        ds.testing.assert_allclose(np.ones(2), {0: 1.0, 1: 1.0})
    with pytest.raises(ds.NotCloseError, match=r"first differ at \['w'\]: keys only actual has: 'x'; only desired "
                                               r"has: 'y'"):
        ds.testing.assert_allclose({"w": {"x": 1.0}}, {"w": {"y": 1.0}})


def test_none_is_an_empty_part_of_a_nest():
    ds.testing.assert_allclose({"a": 1.0, "b": None}, {"b": None, "a": 1.0})
    with pytest.raises(ds.NotCloseError, match=r"actual has 1 leaves \(\['a'\]\), desired has 2 leaves \(\['a'\], \['b'\]\)\. They first differ at "
                                               r"\['b'\]: actual has None there, desired a single value"):
        ds.testing.assert_allclose({"a": 1.0, "b": None}, {"a": 1.0, "b": 2.0})


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
    with pytest.raises(ds.GradientCheckUsageError, match=r"input 0 is a numpy int64 \(3,\) on cpu:0 array: central "
                                                         r"differences move each element by eps, which an integer"):
        ds.testing.numerical_grad(lambda i: i * 2.0, (np.arange(3),), (x,))
    with pytest.raises(ds.GradientCheckUsageError, match=r"input 0 is a numpy complex128 \(3,\) on cpu:0 array\. "
                                                         r"devshim's gradient checks take real inputs only.*re \+ 1j \* im"):
        ds.testing.numerical_grad(lambda z: z * 2.0, (np.ones(3) * 1j,), (x,))
    with pytest.raises(ds.GradientCheckUsageError, match=r"input 1 is a builtins\.str, not a tensor"):
        ds.testing.numerical_grad(lambda x, s: x, (x, "label"), (x,))
    with pytest.raises(ds.GradientCheckUsageError, match=r"f returned 1 output, but grad_outputs has 2"):
        ds.testing.numerical_grad(lambda x: x, (x,), (x, x))
    with pytest.raises(ds.GradientCheckUsageError, match=r"grad_outputs for the output of f has shape \(2,\), but the "
                                                         r"output of f has shape \(3,\)"):
        ds.testing.numerical_grad(lambda x: x, (x,), (np.ones(2),))
    with pytest.raises(ds.GradientFunctionError, match=r"this f\(a, b\) cannot be called so"):
        ds.testing.numerical_grad(lambda a, b: a, (x,), (x,))
    with pytest.raises(ds.GradientCheckUsageError, match=r"grad_outputs gives a gradient for output \[1\] of f, which "
                                                         r"is a int64 tensor: it has no gradient"):
        ds.testing.numerical_grad(lambda x: (x * 2, np.argsort(x)), (x,), (x, x))
    with pytest.raises(ds.GradientCheckUsageError, match=r"numerical_grad\(dtype='float32'\) takes the numerical "
                                                         r"gradient of the values f reads in float32, but input 0 .* "
                                                         r"only torch can change a tensor's dtype in place"):
        ds.testing.numerical_grad(lambda: x * 2, (x,), (x,), dtype="float32")
    with pytest.raises(ds.GradientCheckUsageError, match=r"got no inputs"):
        ds.testing.numerical_grad(lambda: x, (), (x,))
    frozen = np.ones(3)
    frozen.flags.writeable = False
    with pytest.raises(ds.ImmutableInputError, match=r"input 0 \(numpy float64 \(3,\) on cpu:0\) cannot be changed"):
        ds.testing.numerical_grad(lambda: frozen * 2, (frozen,), (x,))


def test_numerical_grad_in_a_wider_dtype_answers_in_the_inputs_dtype():
    x = np.array([0.3, -1.7], dtype=np.float16)
    seen = []

    def f(x):
        seen.append(x.dtype)
        return x * x

    gx, = ds.testing.numerical_grad(f, (x,), (np.ones(2),), dtype="float64")
    assert gx.dtype == np.float16 and set(seen) == {np.dtype("float64")}
    np.testing.assert_allclose(gx.astype(np.float64), 2 * x.astype(np.float64), rtol=1e-3)


def test_the_noise_of_a_central_difference_is_the_rounding_of_the_outputs_that_moved():
    from devshim.testing._numerical import Samples

    plus = [np.float32([1.0, 4.0]), np.float16([2.0])]
    minus = [np.float32([0.5, 4.0]), np.float16([2.0])]
    samples = Samples(0.0, [-0.5, 0.5], [minus, plus], 0.5, 2.0 ** -24)
    total, noise = samples.derivative([np.array([2.0, 3.0]), np.array([1.0])])
    assert total == 1.0  # (1 - 0.5) * 2 over a step of 1
    assert noise == 16 * 2.0 ** -24 * 2.0 * 1.5  # the first element moved (16 roundings); the others carry none
    wider = Samples(0.0, [-0.5, 0.5], [minus, plus], 0.5, 2.0 ** -53)
    assert wider.derivative([np.array([2.0, 3.0]), np.array([0.0])])[1] == (2.0 ** -24 + 15 * 2.0 ** -53) * 3.0
    assert samples.derivative([]) == (0.0, 0.0)


def test_subnormal_outputs_carry_their_absolute_rounding():
    """exp(-100) in float32 is a subnormal, held to a whole step of 2**-149: a central difference of
    it is that step or nothing, whatever the relative tolerance."""
    from devshim.testing._numerical import Samples

    tiny = 2.0 ** -149
    minus, plus = [np.float32([26 * tiny])], [np.float32([27 * tiny])]
    _, noise = Samples(-100.0, [-1e-3, 1e-3], [minus, plus], 1e-3, 2.0 ** -24).derivative([np.array([1.0])])
    assert noise >= tiny / 2e-3  # one step of the subnormals over the step of the inputs


def test_check_double_backward_refuses_numpy_saying_what_to_use():
    with pytest.raises(ds.NoAutodiffError, match=r"so check_double_backward\(\) has no backward to check"):
        ds.testing.check_double_backward(np.exp, (np.ones(3),))


def test_check_backward_refuses_numpy_saying_what_to_use():
    with pytest.raises(ds.NoAutodiffError) as info:
        ds.testing.check_backward(np.exp, (np.ones(3),))
    assert isinstance(info.value, TypeError)
    assert str(info.value).startswith("NumPy has no automatic differentiation, so check_backward() has no backward to "
                                      "check for NumPy arrays. Compare your own backward with the numbers instead: "
                                      "gx, = ds.testing.numerical_grad(f, (x,), (gy,))")


# ------------------------------------------------------------------ framework-specific


@pytest.mark.skipif(not installed["torch"], reason="torch is not installed in this environment")
def test_torch_checks_leave_the_callers_tensors_parameters_and_modules_alone():
    import torch

    x = torch.rand(3, 2, dtype=torch.float64, requires_grad=True)
    y = torch.rand(3, 2, dtype=torch.float64)
    weight = torch.nn.Parameter(torch.rand(2, 2, dtype=torch.float64))
    layer = torch.nn.Linear(2, 2, dtype=torch.float64)
    layer.weight.grad = torch.full_like(layer.weight, 7.0)
    before = [t.detach().clone() for t in (x, y, weight, layer.weight)]
    seen = []

    def f(x, y, w):
        seen.append(w)
        return torch.tanh(layer(x @ w)) * y

    for check in (ds.testing.check_backward, ds.testing.check_double_backward):
        check(f, (x, y, weight))
    ds.testing.numerical_grad(f, (x, y, weight), (torch.ones(3, 2),))
    assert all(type(w) is torch.nn.Parameter and w is not weight for w in seen)  # a parameter as a parameter
    assert x.grad is None and y.grad is None and weight.grad is None and not y.requires_grad and x.requires_grad
    assert torch.equal(layer.weight.grad, torch.full_like(layer.weight, 7.0))  # not written by the checks
    for tensor, old in zip((x, y, weight, layer.weight), before):
        assert torch.equal(tensor.detach(), old)


@pytest.mark.skipif(not installed["torch"], reason="torch is not installed in this environment")
def test_torch_sparse_gradients_are_compared_dense():
    import torch
    import torch.nn.functional as F

    weight = torch.rand(5, 3)
    indices = torch.tensor([[0, 2], [4, 2]])
    ds.testing.check_backward(lambda w: F.embedding(indices, w, sparse=True), (weight,))

    def wrong(w):  # 1.1 times the embedding, whose gradient autograd sees only once
        return F.embedding(indices, w, sparse=True) + F.embedding(indices, w.detach(), sparse=True) * 0.1

    with pytest.raises(ds.GradientMismatchError, match=r"The gradient of input 0 \(of 1: torch float32 \(5, 3\)"):
        ds.testing.check_backward(wrong, (weight,))


@pytest.mark.skipif(not installed["torch"], reason="torch is not installed in this environment")
def test_torch_checks_run_f_in_full_float32_precision_and_put_the_settings_back():
    import torch

    seen = []
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32

    def f(x):
        seen.append((torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32))
        return x @ x.T

    torch.set_float32_matmul_precision("high")  # TF32 matrix products, where a GPU has them
    try:
        ds.testing.check_backward(f, (torch.rand(3, 3),))
        assert set(seen) == {("highest", False)}
        assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32) == ("high", before[1])
    finally:
        torch.set_float32_matmul_precision(before[0])


@pytest.mark.skipif(not installed["torch"], reason="torch is not installed in this environment")
def test_the_guides_non_differentiable_message_is_the_one_devshim_gives():
    """docs/testing-your-code.md quotes the message for abs(x) + x near 0: it is this code's, word for word."""
    import pathlib

    import torch

    with pytest.raises(ds.NondifferentiableError) as info:
        ds.testing.check_backward(lambda x: abs(x) + x, (torch.tensor([0.0004, -0.0003, 0.0, 0.0007]),), np.ones(4))
    guide = (pathlib.Path(__file__).parent.parent / "docs" / "testing-your-code.md").read_text()
    assert f"devshim.errors.NondifferentiableError: {info.value}" in guide


@pytest.mark.skipif(not installed["torch"], reason="torch is not installed in this environment")
def test_torch_checks_say_so_where_tf32_cannot_be_turned_off(monkeypatch):
    """Where torch refuses to turn cuDNN's TF32 off (its old and new TF32 settings mixed raise on
    reading), the check still runs, and PrecisionWarning names the setting to make: never silently."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("error", ds.PrecisionWarning)
        ds.testing.check_backward(lambda x: x * 2, (torch.rand(3),))  # torch turns it off: no warning

    def refuses(**settings):
        raise RuntimeError("mixing the legacy allow_tf32 and the new fp32_precision settings")

    monkeypatch.setattr(torch.backends.cudnn, "flags", refuses)
    with pytest.warns(ds.PrecisionWarning, match=r"torch could not turn TF32 off for cuDNN in this gradient check "
                                                 r"\(torch\.backends\.cudnn\.flags raised RuntimeError: mixing the "
                                                 r"legacy .*fp32_precision = 'ieee'.*allow_tf32 = False"):
        ds.testing.check_backward(lambda x: x * 2, (torch.rand(3),))


@pytest.mark.skipif(not installed["torch"], reason="torch is not installed in this environment")
def test_torch_tensors_a_closure_reads_change_their_dtype_for_the_numerical_pass():
    """Chainer's form with dtype: the tensors f closes over hold float64 values while f runs, and are
    float32 again, with their values, after."""
    import torch

    x = torch.tensor([0.3, -1.7], dtype=torch.float32)
    before = x.clone()
    seen = []

    def f():
        seen.append(x.dtype)
        return x * x

    gx, = ds.testing.numerical_grad(f, (x,), (np.ones(2),), dtype="float64")
    assert set(seen) == {torch.float64} and x.dtype == torch.float32 and torch.equal(x, before)
    assert gx.dtype == torch.float32
    np.testing.assert_allclose(gx.numpy(), 2 * before.numpy(), rtol=1e-6)


@pytest.mark.skipif(not installed["torch"], reason="torch is not installed in this environment")
def test_torch_default_tolerance_follows_the_outputs_dtype_and_bfloat16_is_checked_in_float32():
    import torch

    x = torch.rand(3, 2) + 0.5

    def half_output(x):  # float32 in, float16 out; 20% more than autograd sees
        return (x * x + (x * x).detach() * 0.2).half()

    with pytest.raises(ds.GradientCheckUsageError, match=r"central differences of the output of f in float16"):
        ds.testing.check_backward(half_output, (x,))
    with pytest.raises(ds.GradientMismatchError, match=r"rtol=0\.05 \(float16's default\)"):
        ds.testing.check_backward(half_output, (x,), eps=2 ** -4)
    ds.testing.check_backward(lambda x: (x * x).half(), (x,), eps=2 ** -4)
    brain = torch.rand(3, 2, dtype=torch.bfloat16) + 0.5
    ds.testing.check_backward(torch.exp, (brain,))  # differentiated numerically in float32
    ds.testing.check_backward(torch.exp, (brain,), dtype=torch.float64)
    with pytest.raises(ds.GradientMismatchError, match=r"rtol=0\.03 \(bfloat16's default\)"):
        ds.testing.check_backward(lambda x: torch.exp(x) + torch.exp(x).detach() * 0.1, (brain,))


@pytest.mark.skipif(not installed["torch"], reason="torch is not installed in this environment")
def test_an_input_no_output_depends_on_has_a_zero_gradient():
    import torch

    x, y = torch.rand(3), torch.rand(3)
    ds.testing.check_backward(lambda x, y: x * 2, (x, y))
    with pytest.raises(ds.GradientMismatchError, match=r"The gradient of input 1 \(of 2"):
        ds.testing.check_backward(lambda x, y: x * 2 + y.detach(), (x, y))  # autograd cannot see y


@pytest.mark.skipif(not installed["torch"], reason="torch is not installed in this environment")
def test_check_backward_passes_integer_inputs_as_they_are_and_refuses_inputs_of_several_frameworks():
    import torch

    seen = []

    def gather(x, i):
        seen.append(i.dtype)
        return x[i]

    ds.testing.check_backward(gather, (torch.rand(3), torch.tensor([2, 0, 2])), dtype="float64")
    assert set(seen) == {torch.int64}
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


@pytest.mark.skipif(not installed["tensorflow"], reason="tensorflow is not installed in this environment")
def test_tensorflow_variables_reach_f_as_copies_that_are_variables():
    import tensorflow as tf

    variable = tf.Variable([[0.5, 1.5], [-0.5, 0.25]], trainable=False)
    seen = []

    def f(v):
        seen.append(v)
        return tf.sin(v) * 2.0

    ds.testing.check_backward(f, (variable,))
    ds.testing.check_double_backward(f, (variable,))
    ds.testing.numerical_grad(f, (variable,), (np.ones((2, 2)),))
    assert seen and all(isinstance(v, tf.Variable) and v is not variable and not v.trainable for v in seen)
    np.testing.assert_array_equal(variable.numpy(), np.float32([[0.5, 1.5], [-0.5, 0.25]]))

    def assigns(v):
        v.assign_add(tf.ones_like(v))
        return v * 2.0

    with pytest.raises(ds.InputMutatedError, match=r"f changed input 0 \(of 1: tensorflow float32 \(2, 2\)"):
        ds.testing.check_backward(assigns, (variable,))
    np.testing.assert_array_equal(variable.numpy(), np.float32([[0.5, 1.5], [-0.5, 0.25]]))


@pytest.mark.skipif(not installed["tensorflow"], reason="tensorflow is not installed in this environment")
def test_tensorflow_indexed_slices_gradients_are_compared_dense():
    import tensorflow as tf

    params = tf.constant(np.random.default_rng(0).uniform(-1, 1, (5, 3)).astype(np.float32))
    indices = tf.constant([0, 2, 2, 4])
    ds.testing.check_backward(lambda p: tf.gather(p, indices), (params,))
    ds.testing.check_backward(lambda p: tf.nn.embedding_lookup(p, indices) * 3.0, (params,))

    def wrong(p):  # 1.1 times the rows, whose gradient the tape sees only once
        return tf.gather(p, indices) + tf.gather(tf.stop_gradient(p), indices) * 0.1

    with pytest.raises(ds.GradientMismatchError, match=r"The gradient of input 0 \(of 1: tensorflow float32 \(5, 3\)"):
        ds.testing.check_backward(wrong, (params,))


@pytest.mark.skipif(not installed["tensorflow"], reason="tensorflow is not installed in this environment")
def test_tensorflow_checks_run_f_without_tf32_and_put_the_setting_back():
    import tensorflow as tf

    seen = []

    def f(x):
        seen.append(tf.config.experimental.tensor_float_32_execution_enabled())
        return tf.matmul(x, x)

    before = tf.config.experimental.tensor_float_32_execution_enabled()
    ds.testing.check_backward(f, (tf.constant([[0.5, 1.0], [2.0, -1.0]]),))
    assert set(seen) == {False}
    assert tf.config.experimental.tensor_float_32_execution_enabled() == before


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
def test_jax_dicts_with_sorted_keys_and_none_leaves_match_the_callers_nests():
    import jax
    import jax.numpy as jnp

    x = jnp.array([0.5, 1.5, -0.25], dtype=jnp.float32)
    step = jax.jit(lambda x: {"w": x * 2, "b": jnp.sum(x), "unused": None})
    ds.testing.assert_allclose(step(x), {"w": 2 * np.asarray(x), "b": float(np.sum(np.asarray(x))), "unused": None})
    ds.testing.check_backward(step, (x,))
    ds.testing.check_backward(step, (x,), {"b": 1.0, "w": np.ones(3), "unused": None})
    ds.testing.check_double_backward(lambda x: (jnp.sin(x), None, x > 0), (x,))
    with pytest.raises(ds.NotCloseError, match=r"They first differ at \['unused'\]"):
        ds.testing.assert_allclose(step(x), {"w": 2 * np.asarray(x), "b": 0.0, "unused": 1.0})


@pytest.mark.skipif(not installed["jax"], reason="jax is not installed in this environment")
def test_jax_checks_run_f_at_the_highest_matmul_precision():
    import jax
    import jax.numpy as jnp

    seen = []

    def f(x):
        seen.append(jax.config.jax_default_matmul_precision)
        return x @ x

    ds.testing.check_backward(f, (jnp.array([[0.5, 1.0], [2.0, -1.0]]),))
    assert set(seen) == {"highest"}


@pytest.mark.skipif(not installed["mxnet"], reason="mxnet is not installed in this environment")
def test_mxnet_nd_arrays_stay_nd_arrays():
    import mxnet as mx

    x = mx.nd.array([[0.5, -1.0], [0.25, 2.0]])
    seen = []

    def f(x):
        seen.append(type(x))
        return mx.nd.exp(x) * 2

    gx, = ds.testing.numerical_grad(f, (x,), (np.ones((2, 2)),))
    assert type(gx) is mx.nd.NDArray
    np.testing.assert_allclose(gx.asnumpy(), 2 * np.exp(x.asnumpy()), rtol=1e-3)
    ds.testing.check_backward(f, (x,))
    assert set(seen) == {mx.nd.NDArray}


@pytest.mark.skipif(not installed["mxnet"], reason="mxnet is not installed in this environment")
def test_mxnet_checks_leave_a_gluon_blocks_parameter_gradients_and_the_callers_arrays_alone():
    import mxnet as mx
    from mxnet import gluon

    net = gluon.nn.Dense(3, in_units=2)
    net.initialize()
    for parameter in net.collect_params().values():
        parameter.grad()[:] = 7.0
    front = mx.np if mx.util.is_np_array() else mx.nd  # what the block takes: numpy semantics may be on
    x = front.array([[0.5, -1.0], [0.25, 2.0]])
    x.attach_grad()
    ds.testing.check_backward(lambda x: net(x), (x,))
    ds.testing.numerical_grad(lambda x: net(x), (x,), (np.ones((2, 3)),))
    for parameter in net.collect_params().values():
        np.testing.assert_array_equal(parameter.grad().asnumpy(), 7.0)
    np.testing.assert_array_equal(x.grad.asnumpy(), 0.0)


@pytest.mark.skipif(not installed["mxnet"], reason="mxnet is not installed in this environment")
def test_mxnet_row_sparse_gradients_and_outputs_that_depend_on_no_input():
    import mxnet as mx

    weight = mx.nd.array(np.random.default_rng(0).uniform(-1, 1, (5, 2)).astype(np.float32))
    indices = mx.nd.array([1, 3, 3])
    ds.testing.check_backward(lambda w: mx.nd.Embedding(indices, w, 5, 2, sparse_grad=True), (weight,))
    constant = mx.np.array([1.0, 2.0])
    x = mx.np.array([0.5, -0.5])
    ds.testing.check_backward(lambda x, w: (x * 2, constant), (x, weight))
    ds.testing.check_double_backward(lambda x: mx.np.exp(x), (x,))
    with pytest.raises(ds.NoAutodiffError, match=r"its operator _backward_npi_broadcast_mul"):
        ds.testing.check_double_backward(lambda x: x * x, (x,))


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

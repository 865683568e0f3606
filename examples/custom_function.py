"""Chainer's "Define your own function", on every framework: ExpAdd and MulAdd, written once.

The tutorial writes a function's forward and backward once with ``xp`` (NumPy or CuPy), then
tests it on CPU and GPU arrays. Here the same two functions, forward and backward written
once with ``xp = ds.array_module(x)``, become each framework's custom-gradient function
(``torch.autograd.Function``, ``jax.custom_vjp``, ``tf.custom_gradient``,
``mx.autograd.Function``), and are tested on the CPU and on every GPU (virtual ones too) with

    ds.testing.check_backward(f, inputs)          # the framework's autodiff against numbers
    ds.testing.check_double_backward(f, inputs)   # and the gradient of the backward (second order)
    ds.testing.numerical_grad(f, inputs, gys)     # central differences, on the inputs' device
    ds.testing.assert_allclose(a, b)              # any framework, any device, mixed

A backward with a mistake in it is caught too. The backward written with ``xp`` is made of the
framework's own operations, so the framework differentiates it again: ``check_double_backward``
checks that second order against central differences of the backward (MXNet 1.9 differentiates
its custom functions once only: there the second order is checked on ``exp`` itself). NumPy
has no autodiff: there the example compares the hand-written backward with ``numerical_grad``
itself, as the tutorial's first test does, and the backward's own derivative the same way. Run it with DEVSHIM_BACKEND=torch (tensorflow, jax, mxnet, numpy), and
DEVSHIM_VIRTUAL_DEVICES=2 for two virtual GPUs.
"""

from __future__ import annotations

import contextlib

import numpy as np

import devshim as ds

# ------------------------------------------------------------------ written once, with xp


def expadd_forward(x, y):
    xp = ds.array_module(x, y)
    return xp.exp(x) + xp.exp(y)


def expadd_backward(x, y, gz):
    xp = ds.array_module(x, y, gz)
    return gz * xp.exp(x), gz * xp.exp(y)


def muladd_forward(x, y, z):
    return x * y + z


def muladd_backward(x, y, z, gw):
    return y * gw, x * gw, gw


def wrong_expadd_backward(x, y, gz):
    """The mistake check_backward must catch: d exp(x)/dx written as x."""
    return gz * x, gz * y


# ------------------------------------------------------------------ each framework's wrapper


def torch_function(forward, backward):
    import torch

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            ctx.save_for_backward(*inputs)
            return forward(*inputs)

        @staticmethod
        def backward(ctx, grad):
            return tuple(backward(*ctx.saved_tensors, grad))

    return Function.apply


def jax_function(forward, backward):
    import jax

    function = jax.custom_vjp(forward)
    function.defvjp(lambda *inputs: (forward(*inputs), inputs),
                    lambda inputs, grad: tuple(backward(*inputs, grad)))
    return function


def tensorflow_function(forward, backward):
    import tensorflow as tf

    @tf.custom_gradient
    def function(*inputs):
        return forward(*inputs), lambda grad: tuple(backward(*inputs, grad))

    return function


def mxnet_function(forward, backward):
    import mxnet as mx

    class Function(mx.autograd.Function):
        def forward(self, *inputs):
            self.save_for_backward(*inputs)
            return forward(*inputs)

        def backward(self, grad):
            # MXNet 1.9 hands the gradient over, and takes them back, as classic NDArrays.
            grads = backward(*self.saved_tensors, grad.as_np_ndarray())
            return tuple(g.as_nd_ndarray() for g in grads)

    return lambda *inputs: Function()(*inputs)


WRAPPERS = {"torch": torch_function, "jax": jax_function, "tensorflow": tensorflow_function,
            "mxnet": mxnet_function}


# ------------------------------------------------------------------ the tests


def random_inputs(count: int, device, seed: int) -> tuple:
    """``count`` float32 arrays of shape (3, 2), uniform in [-1, 1), of the selected backend on
    ``device`` (made with NumPy, then copied there: an explicit copy, in memory the framework
    allocated)."""
    rng = np.random.default_rng(seed)
    backend = ds.get_backend().name
    return tuple(ds.convert(rng.uniform(-1, 1, (3, 2)).astype(np.float32), backend, device=device, copy=True)
                 for _ in range(count))


def on(device):
    """Where the example's own calls run: TensorFlow runs an op under the device scope in force
    (devshim's TensorFlow devices are ``with`` blocks); the others where its inputs are.
    ``check_backward`` and ``numerical_grad`` run ``f`` on the inputs' device themselves."""
    return device if ds.get_backend().name == "tensorflow" else contextlib.nullcontext()


def check_second_order(expadd, name: str, x, y) -> str:
    """check_double_backward of ExpAdd (of exp alone on MXNet, whose autograd.Function backward
    it cannot differentiate); what was checked, for the report."""
    if name == "mxnet":
        xp = ds.array_module(x)
        ds.testing.check_double_backward(lambda x: xp.exp(x), (x,))
        return "check_double_backward of exp passed (MXNet differentiates a custom function once)"
    ds.testing.check_double_backward(expadd, (x, y))
    return "check_double_backward of ExpAdd passed"


def check_with_autodiff(wrap, name: str, where: str, device) -> None:
    expadd = wrap(expadd_forward, expadd_backward)
    muladd = wrap(muladd_forward, muladd_backward)
    x, y, z = random_inputs(3, device, seed=0)
    ds.testing.check_backward(expadd, (x, y))
    ds.testing.check_backward(muladd, (x, y, z))
    second = check_second_order(expadd, name, x, y)
    print(f"{name}: ExpAdd and MulAdd on {where}: check_backward passed; {second}")
    with on(device):
        z = expadd(x, y)
    ds.testing.assert_allclose(z, np.exp(ds.to_numpy(x)) + np.exp(ds.to_numpy(y)))
    print(f"{name}: ExpAdd(x, y) on {where} equals NumPy's exp(x) + exp(y) (assert_allclose, mixed)")
    try:
        ds.testing.check_backward(wrap(expadd_forward, wrong_expadd_backward), (x, y))
    except ds.GradientMismatchError as mismatch:
        print(f"{name}: a wrong ExpAdd backward on {where} is caught: {str(mismatch).splitlines()[0]}")
    else:
        raise SystemExit(f"{name}: check_backward passed a wrong backward on {where}")


def check_by_hand(name: str, where: str, device) -> None:
    """The tutorial's first test, for a framework without autodiff: numerical_grad against
    the hand-written backward."""
    x, y = random_inputs(2, device, seed=0)
    gz, = random_inputs(1, device, seed=1)
    gx, gy = ds.testing.numerical_grad(expadd_forward, (x, y), (gz,))
    ds.testing.assert_allclose(expadd_backward(x, y, gz), (gx, gy), rtol=1e-2, atol=1e-3)
    # The second order by hand: the backward's own derivative in x is gz * exp(x), again by numbers.
    gxx, = ds.testing.numerical_grad(lambda x: expadd_backward(x, y, gz)[0], (x,), (np.ones((3, 2)),))
    ds.testing.assert_allclose(gxx, gz * np.exp(ds.to_numpy(x)), rtol=1e-2, atol=1e-3)
    print(f"{name}: ExpAdd's backward on {where} equals numerical_grad's")
    try:
        ds.testing.check_backward(expadd_forward, (x, y))
    except ds.NoAutodiffError as refusal:
        print(f"{name}: check_backward refuses: {str(refusal).split(', so')[0]}")


def main() -> None:
    name = ds.get_backend().name
    for device in [ds.cpu()] + ([] if name == "numpy" else ds.devices()[1:]):
        with ds.transfer_guard("disallow"):  # every copy here is explicit
            placed = ds.neutral_device(random_inputs(1, device, seed=2)[0])
            where = f"{placed}{' (virtual)' if placed.virtual else ''}"
            if name in WRAPPERS:
                check_with_autodiff(WRAPPERS[name], name, where, device)
            else:
                check_by_hand(name, where, device)


if __name__ == "__main__":
    main()

"""The contract a backend's `autodiff.py` implements: `Autodiff`.

`ds.testing.check_backward` and `check_double_backward` compare a framework's own
automatic differentiation with finite differences (`devshim/testing/gradients.py`); what
they need from each framework is one subclass of `Autodiff` in the backend's optional
`autodiff.py` (the registry finds it: `registry.autodiff`). `autodiff.py` is loaded only
by `ds.testing`, so it may import its framework at module level. A backend without one
(NumPy, CuPy) has no autodiff: the checks refuse its arrays with `NoAutodiffError`,
`numerical_grad` changes its arrays in place with `x[index] = value`, and its copies are
plain arrays.

What the checks hand `vjp` and `gradient_function` are their own private copies of the
caller's inputs, made by `copy_like`: a backend may mark them for differentiation in place.
`wrt` says which of them to differentiate by (the floating-point ones; integer inputs go to
`f` as they are); `params` are the caller's own tensors that `f` reads itself, whose gradients
come after the inputs' (inside `differentiating(params)`). The functions they differentiate
return a list of floating-point tensors (the outputs that have a gradient, picked from
whatever `f` returned).

Example:
    >>> autodiff = ds.backends.autodiff("jax")
    >>> outputs, pullback = autodiff.vjp(lambda x: [jnp.sin(x)], (jnp.zeros(2),))
    >>> pullback([jnp.ones(2)])
    [Array([1., 1.], dtype=float32)]
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod

__all__ = ["Autodiff"]


class Autodiff(ABC):
    """One framework's automatic differentiation (the class a backend's `autodiff.py` defines).

    Example:
        >>> ds.backends.autodiff("torch").can_change_in_place(torch.ones(2))
        True
    """

    #: Whether the framework differentiates a backward with respect to the gradients it was
    #: given, as well as the inputs (MXNet's second order holds them constant).
    differentiates_grad_outputs = True

    @abstractmethod
    def vjp(self, f, inputs: tuple, wrt: list, params: list = ()):
        """`(outputs, pullback)`: `outputs = f(*inputs)` (a list of tensors, maybe empty) run
        under the framework's autodiff, and `pullback(grad_outputs)`, which takes a list with
        one tensor per output (same shape, dtype and device) and returns a list with one dense
        gradient per input, of the input's kind (a sparse gradient made dense), then one per
        param; None for an input not in `wrt`, and where the framework says the outputs do not
        depend on that input. An output that depends on no input is allowed. `pullback` is
        called once.

        Example:
            >>> outputs, pullback = autodiff.vjp(lambda x: [x * 2], (x,), [True])
            >>> pullback([torch.ones(3)])
            [tensor([2., 2., 2.])]
        """

    @abstractmethod
    def gradient_function(self, f, count: int, wrt: list, params: list = ()):
        """A function of `count` inputs followed by one gradient per output of `f` (a
        function returning a list of tensors), returning the list of `f`'s gradients with
        respect to the inputs in `wrt`, then to `params` (zeros where they do not depend on
        one): the first-order backward as a function, itself differentiable by `vjp` (for
        `check_double_backward`).

        Example:
            >>> first_order = autodiff.gradient_function(lambda x: [x * x], 1, [True])
            >>> first_order(x, torch.ones(3))
            [tensor([2., 4., 6.])]
        """

    def differentiating(self, params: list):
        """A `with` block in which the autodiff records `params` (the caller's tensors that
        `f` reads itself) so that `vjp` can differentiate by them; what it changes to do so
        is put back after. The default: nothing to change.

        Example:
            >>> with autodiff.differentiating([weight]):
            ...     outputs, pullback = autodiff.vjp(f, (x,), [True], [weight])
        """
        return contextlib.nullcontext()

    def retype(self, x, fresh):
        """Make `x` (the caller's tensor, which `f` reads itself) hold `fresh`, of another
        dtype, in place, and return a function that puts `x` back as it was; None where the
        framework cannot change a tensor's dtype in place (the default).

        Example:
            >>> restore = autodiff.retype(x, x.double())
            >>> restore()
        """
        return None

    def copy_like(self, x, fresh):
        """`fresh` (a new tensor of `x`'s framework, holding the values of a copy of `x`)
        made the same kind of object as `x`: a variable stays a variable, a parameter a
        parameter, an MXNet `nd` array an `nd` array. What `f` receives in a check.

        Example:
            >>> autodiff.copy_like(tf.Variable([1.0]), tf.constant([2.0]))
            <tf.Variable ... numpy=array([2.], dtype=float32)>
        """
        return fresh

    def gradient_like(self, x, fresh):
        """`fresh` as the kind of array a gradient for `x` is: the framework's plain tensor
        (an MXNet `nd` array for an `nd` input).

        Example:
            >>> autodiff.gradient_like(torch.nn.Parameter(torch.ones(2)), torch.zeros(2))
            tensor([0., 0.])
        """
        return fresh

    def full_precision(self):
        """A `with` block in which float32 arithmetic is float32 throughout: matrix products
        and convolutions that a GPU would run in TF32 (10 bits of mantissa) by default run in
        full float32, so that central differences of `f` are not swamped by TF32's rounding.
        The default: nothing to change.

        Example:
            >>> with autodiff.full_precision():
            ...     y = f(x)
        """
        return contextlib.nullcontext()

    def can_change_in_place(self, x) -> bool:
        """Whether `x`'s elements can be set in place (`set_element`); JAX arrays and
        TensorFlow tensors that are not variables cannot.

        Example:
            >>> ds.backends.autodiff("jax").can_change_in_place(jnp.ones(2))
            False
        """
        return True

    def set_element(self, x, index: tuple, value: float) -> None:
        """`x[index] = value` in place, outside the framework's autodiff record (`value` is
        exactly representable in `x`'s dtype).

        Example:
            >>> autodiff.set_element(x, (0, 1), 2.5)
        """
        x[index] = value

    def assign(self, x, fresh) -> None:
        """Every element of `x` set in place from `fresh` (a tensor of `x`'s shape), outside
        the framework's autodiff record: how a check puts back an array that `f` changed.

        Example:
            >>> autodiff.assign(x, torch.zeros(3))
        """
        x[...] = fresh

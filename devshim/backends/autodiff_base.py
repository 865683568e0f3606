"""The contract a backend's ``autodiff.py`` implements: ``Autodiff``.

``ds.testing.check_backward`` compares a framework's own automatic
differentiation with finite differences (``devshim/testing/gradients.py``); what
it needs from each framework is one subclass of ``Autodiff`` in the backend's
optional ``autodiff.py`` (the registry finds it: ``registry.autodiff``).
``autodiff.py`` is loaded only by ``ds.testing``, so it may import its framework at
module level. A backend without one (NumPy, CuPy) has no autodiff:
``check_backward`` refuses its arrays with ``NoAutodiffError``, and
``numerical_grad`` changes its arrays in place with ``x[index] = value``.

Example:
    >>> autodiff = ds.backends.autodiff("jax")
    >>> outputs, pullback = autodiff.vjp(jnp.sin, (jnp.zeros(2),))
    >>> pullback(jnp.ones(2))
    [Array([1., 1.], dtype=float32)]
"""

from __future__ import annotations

from abc import ABC, abstractmethod

__all__ = ["Autodiff"]


class Autodiff(ABC):
    """One framework's automatic differentiation (the class a backend's ``autodiff.py`` defines).

    Example:
        >>> ds.backends.autodiff("torch").can_change_in_place(torch.ones(2))
        True
    """

    @abstractmethod
    def vjp(self, f, inputs: tuple):
        """``(outputs, pullback)``: ``outputs = f(*inputs)`` run under the framework's autodiff,
        and ``pullback(grad_outputs)``, which takes tensors in the nest structure of ``outputs``
        (same shapes, dtypes and devices) and returns a list with one gradient per input: the
        vector-Jacobian product, computed by the framework, or None where the framework says
        the outputs do not depend on that input. ``pullback`` is called once.

        Example:
            >>> outputs, pullback = autodiff.vjp(lambda x: x * 2, (x,))
            >>> pullback(torch.ones(3))
            [tensor([2., 2., 2.])]
        """

    def can_change_in_place(self, x) -> bool:
        """Whether ``x``'s elements can be set in place (``set_element``); JAX arrays and
        TensorFlow tensors that are not variables cannot.

        Example:
            >>> ds.backends.autodiff("jax").can_change_in_place(jnp.ones(2))
            False
        """
        return True

    def set_element(self, x, index: tuple, value: float) -> None:
        """``x[index] = value`` in place, outside the framework's autodiff record (``value`` is
        exactly representable in ``x``'s dtype).

        Example:
            >>> autodiff.set_element(x, (0, 1), 2.5)
        """
        x[index] = value

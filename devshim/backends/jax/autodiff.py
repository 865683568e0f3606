"""JAX's autodiff for ``ds.testing.check_backward``: ``jax.vjp`` (which runs a
``jax.custom_vjp`` function's own backward rule). JAX arrays are immutable, so
``numerical_grad`` calls a JAX function with the inputs as arguments."""

from __future__ import annotations

import jax

from devshim.backends.autodiff_base import Autodiff

__all__ = ["JaxAutodiff"]


class JaxAutodiff(Autodiff):
    """``jax.vjp`` of ``f`` at the inputs.

    Example:
        >>> outputs, pullback = JaxAutodiff().vjp(jax.numpy.exp, (jax.numpy.zeros(2),))
        >>> pullback(jax.numpy.ones(2))
        [Array([1., 1.], dtype=float32)]
    """

    def vjp(self, f, inputs: tuple):
        outputs, pull = jax.vjp(f, *inputs)
        return outputs, lambda grad_outputs: list(pull(grad_outputs))

    def can_change_in_place(self, x) -> bool:
        return False

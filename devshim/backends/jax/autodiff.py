"""JAX's autodiff for `ds.testing`'s gradient checks: `jax.vjp` (which runs a
`jax.custom_vjp` function's own backward rule), and `jax.vjp` of `jax.vjp` for second
order. JAX arrays are immutable, so `numerical_grad` calls a JAX function with the inputs as
arguments, and `f` cannot change its inputs."""

from __future__ import annotations

import jax

from devshim.backends.autodiff_base import Autodiff

__all__ = ["JaxAutodiff"]


class JaxAutodiff(Autodiff):
    """`jax.vjp` of `f` at the inputs.

    Example:
        >>> outputs, pullback = JaxAutodiff().vjp(lambda x: [jax.numpy.exp(x)], (jax.numpy.zeros(2),))
        >>> pullback([jax.numpy.ones(2)])
        [Array([1., 1.], dtype=float32)]
    """

    def vjp(self, f, inputs: tuple):
        outputs, pull = jax.vjp(f, *inputs)
        return outputs, lambda grad_outputs: list(pull(list(grad_outputs)))

    def gradient_function(self, f, count: int):
        def first_order(*arguments) -> list:
            _, pull = jax.vjp(f, *arguments[:count])
            return list(pull(list(arguments[count:])))

        return first_order

    def full_precision(self):
        return jax.default_matmul_precision("highest")

    def can_change_in_place(self, x) -> bool:
        return False

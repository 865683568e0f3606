"""JAX's autodiff for `ds.testing`'s gradient checks: `jax.vjp` (which runs a
`jax.custom_vjp` function's own backward rule), and `jax.vjp` of `jax.vjp` for second
order. JAX arrays are immutable, so `numerical_grad` calls a JAX function with the inputs as
arguments, `f` cannot change its inputs, and `params` (tensors `f` reads itself) are refused:
pass them as inputs."""

from __future__ import annotations

import jax

from devshim.backends.autodiff_base import Autodiff

__all__ = ["JaxAutodiff"]


def _by(f, inputs, wrt: list):
    """`f` as a function of the inputs in `wrt` alone, the others held as given (JAX
    differentiates every argument of the function it is handed)."""
    def moved(*moving):
        found = iter(moving)
        return f(*[next(found) if w else x for x, w in zip(inputs, wrt)])

    return moved


class JaxAutodiff(Autodiff):
    """`jax.vjp` of `f` at the inputs.

    Example:
        >>> outputs, pullback = JaxAutodiff().vjp(lambda x: [jax.numpy.exp(x)], (jax.numpy.zeros(2),), [True])
        >>> pullback([jax.numpy.ones(2)])
        [Array([1., 1.], dtype=float32)]
    """

    def vjp(self, f, inputs: tuple, wrt: list, params: list = ()):
        outputs, pull = jax.vjp(_by(f, inputs, wrt), *[x for x, w in zip(inputs, wrt) if w])

        def pullback(grad_outputs: list) -> list:
            found = iter(pull(list(grad_outputs)))
            return [next(found) if w else None for w in wrt]

        return outputs, pullback

    def gradient_function(self, f, count: int, wrt: list, params: list = ()):
        def first_order(*arguments) -> list:
            xs = arguments[:count]
            _, pull = jax.vjp(_by(f, xs, wrt), *[x for x, w in zip(xs, wrt) if w])
            return list(pull(list(arguments[count:])))

        return first_order

    def full_precision(self):
        return jax.default_matmul_precision("highest")

    def can_change_in_place(self, x) -> bool:
        return False

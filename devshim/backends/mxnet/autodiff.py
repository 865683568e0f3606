"""MXNet's autodiff for ``ds.testing.check_backward``: ``mx.autograd.record`` and
``mx.autograd.backward`` (which run an ``mx.autograd.Function``'s own ``backward``) on
copies of the inputs with gradients attached, so the caller's arrays keep theirs."""

from __future__ import annotations

import mxnet as mx

from devshim._tree import iter_leaves
from devshim.backends.autodiff_base import Autodiff

__all__ = ["MXNetAutodiff"]


class MXNetAutodiff(Autodiff):
    """``mx.autograd.backward`` of ``f``'s outputs, recorded at copies of the inputs.

    Example:
        >>> outputs, pullback = MXNetAutodiff().vjp(mx.np.exp, (mx.np.zeros(2),))
        >>> pullback(mx.np.ones(2))
        [array([1., 1.])]
    """

    def vjp(self, f, inputs: tuple):
        leaves = [x.copy() for x in inputs]
        for leaf in leaves:
            leaf.attach_grad()
        with mx.autograd.record():
            outputs = f(*leaves)

        def pullback(grad_outputs) -> list:
            ys = [y for _, y in iter_leaves(outputs)]
            gys = [gy for _, gy in iter_leaves(grad_outputs)]
            mx.autograd.backward(ys, head_grads=gys)
            return [leaf.grad for leaf in leaves]

        return outputs, pullback

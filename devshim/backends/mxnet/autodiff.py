"""MXNet's autodiff for `ds.testing`'s gradient checks: `mx.autograd.record` and
`mx.autograd.grad` (which run an `mx.autograd.Function`'s own `backward`) on the
checks' private copies of the inputs, with gradients attached to the copies only: the caller's
arrays keep theirs, and a Gluon block's parameters keep their `.grad` (`autograd.grad`
writes none, where `autograd.backward` would). Gradients come back as the input's kind
(`mx.np` or classic `mx.nd`), dense.

MXNet refuses to differentiate an output that depends on no input, or with respect to an input
no output depends on; each output is given a zero that depends on every input, so both are
zeros instead. Its second order covers few operators (MXNet 1.9: exp, log, tanh, relu and
some other elementwise ones; not `*`): `check_double_backward` of anything else raises
`NoAutodiffError` naming the operator. An array given in `params` that holds no gradient
buffer gets one (`attach_grad`), which MXNet cannot take back. Nor does it reach the gradients given to the backward
(they are constants to it): there the check differentiates the backward by the inputs only."""

from __future__ import annotations

import mxnet as mx

from devshim.backends.autodiff_base import Autodiff
from devshim.errors import NoAutodiffError

__all__ = ["MXNetAutodiff"]


def _as_np(x):
    return x if isinstance(x, mx.np.ndarray) else x.as_np_ndarray()


def _like(x, gradient):
    if gradient.stype != "default":  # row_sparse, from Embedding(sparse_grad=True)
        gradient = gradient.tostype("default")
    return _as_np(gradient) if isinstance(x, mx.np.ndarray) else gradient.as_nd_ndarray()


def _anchored(outputs: list, leaves: tuple) -> list:
    """Each output plus a zero computed from every leaf, recorded: MXNet then differentiates any
    output with respect to any leaf (zero where they are unrelated)."""
    zero = None
    for leaf in leaves:
        term = (_as_np(leaf) * 0).sum()
        zero = term if zero is None else zero + term
    return [_as_np(y) if zero is None else _as_np(y) + zero.astype(y.dtype) for y in outputs]


def _recorded(f, args, wrt: list, params: list):
    """The inputs among `args` that `wrt` selects (given a gradient buffer), and `params`;
    `f(*args)` recorded; and its outputs anchored to those (`_anchored`)."""
    targets = [x for x, w in zip(args, wrt) if w] + list(params)
    for leaf in targets[:len(targets) - len(params)]:  # the checks' own copies
        leaf.attach_grad()
    with mx.autograd.record():
        outputs = f(*args)
        with mx.util.np_shape(True):
            heads = _anchored(list(outputs), targets)
    return targets, outputs, heads


def _second_order_refusal(err) -> NoAutodiffError:
    operator = str(err).split("Operator ", 1)[-1].split(" ", 1)[0]
    return NoAutodiffError(
        f"MXNet has no second-order gradient for this f: its operator {operator} (the backward of one of "
        f"f's operations) registers no gradient of its own, so MXNet cannot differentiate f's backward. "
        f"MXNet 1.9 differentiates twice only some elementwise operators (exp, log, tanh, relu, ...). Check "
        f"the first order with check_backward, or the second order on a framework that has it (torch, jax, "
        f"tensorflow).")


def _gradients(heads: list, leaves, grad_outputs: list, create_graph: bool) -> list:
    if not heads or not leaves:
        return [None] * len(leaves)
    try:
        found = mx.autograd.grad(heads, list(leaves), head_grads=[_as_np(g) for g in grad_outputs],
                                 retain_graph=create_graph, create_graph=create_graph)
    except mx.base.MXNetError as err:
        if "non-differentiable because it didn't register FGradient" in str(err):
            raise _second_order_refusal(err) from None
        if create_graph and ("not in a computational graph" in str(err) or "unreachable" in str(err)):
            raise NoAutodiffError(
                "MXNet cannot differentiate the backward of an f with an output that does not depend on every "
                "input (its second order has no zero for them): check_double_backward cannot check this f on "
                "MXNet. Check the first order with check_backward, or pass only the inputs every output "
                "depends on (close over the others).") from None
        raise
    return [_like(leaf, g) for leaf, g in zip(leaves, found)]


class MXNetAutodiff(Autodiff):
    """`mx.autograd.grad` of `f`'s outputs, recorded at the checks' copies of the inputs.

    Example:
        >>> outputs, pullback = MXNetAutodiff().vjp(lambda x: [mx.np.exp(x)], (mx.np.zeros(2),), [True])
        >>> pullback([mx.np.ones(2)])
        [array([1., 1.])]
    """

    differentiates_grad_outputs = False

    def vjp(self, f, inputs: tuple, wrt: list, params: list = ()):
        targets, outputs, heads = _recorded(f, inputs, wrt, params)

        def pullback(grad_outputs: list) -> list:
            with mx.util.np_shape(True):
                found = iter(_gradients(heads, targets, list(grad_outputs), create_graph=False))
            return [next(found) if w else None for w in wrt] + list(found)

        return outputs, pullback

    def gradient_function(self, f, count: int, wrt: list, params: list = ()):
        def first_order(*arguments) -> list:
            xs, gys = arguments[:count], list(arguments[count:])
            if mx.autograd.is_recording():  # inside vjp: xs are its leaves, the result is recorded
                targets = [x for x, w in zip(xs, wrt) if w] + list(params)
                return _gradients(list(f(*xs)), targets, gys, create_graph=True)
            leaves = tuple(x.copy() if w else x for x, w in zip(xs, wrt))
            targets, _, heads = _recorded(f, leaves, wrt, params)
            with mx.util.np_shape(True):
                return _gradients(heads, targets, gys, create_graph=False)

        return first_order

    def differentiating(self, params: list):
        for p in params:  # an array MXNet differentiates by must hold a gradient buffer
            if p.grad is None:
                p.attach_grad()
        return super().differentiating(params)

    def copy_like(self, x, fresh):
        return fresh if isinstance(x, mx.np.ndarray) else fresh.as_nd_ndarray()

    gradient_like = copy_like

    def assign(self, x, fresh) -> None:
        x[:] = fresh

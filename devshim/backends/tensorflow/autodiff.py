"""TensorFlow's autodiff for ``ds.testing.check_backward``: a ``tf.GradientTape`` watching
the inputs (which runs a ``tf.custom_gradient`` function's own gradient). Only
``tf.Variable``\\ s can be changed in place, so ``numerical_grad`` calls a function of
plain tensors with the inputs as arguments."""

from __future__ import annotations

import tensorflow as tf

from devshim._tree import iter_leaves
from devshim.backends.autodiff_base import Autodiff

__all__ = ["TensorFlowAutodiff"]


class TensorFlowAutodiff(Autodiff):
    """``tape.gradient`` of ``f``'s outputs with respect to its inputs.

    Example:
        >>> outputs, pullback = TensorFlowAutodiff().vjp(tf.exp, (tf.zeros(2),))
        >>> pullback(tf.ones(2))
        [<tf.Tensor: shape=(2,), dtype=float32, numpy=array([1., 1.], dtype=float32)>]
    """

    def vjp(self, f, inputs: tuple):
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            for x in inputs:
                tape.watch(x)
            outputs = f(*inputs)

        def pullback(grad_outputs) -> list:
            ys = [y for _, y in iter_leaves(outputs)]
            gys = [gy for _, gy in iter_leaves(grad_outputs)]
            return list(tape.gradient(ys, list(inputs), output_gradients=gys))

        return outputs, pullback

    def can_change_in_place(self, x) -> bool:
        return isinstance(x, tf.Variable)

    def set_element(self, x, index: tuple, value: float) -> None:
        with tf.device(x.device):
            if not index:
                x.assign(tf.constant(value, dtype=x.dtype))
            else:
                x.scatter_nd_update([list(index)], tf.constant([value], dtype=x.dtype))

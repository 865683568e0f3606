"""TensorFlow's autodiff for `ds.testing`'s gradient checks: a `tf.GradientTape` watching
the inputs (which runs a `tf.custom_gradient` function's own gradient), two nested tapes
for second order. Only `tf.Variable`\\ s can be changed in place, so `numerical_grad`
calls a function of plain tensors with the inputs as arguments; a variable input reaches `f`
as a variable (a copy). `IndexedSlices` gradients (`tf.gather`) come back dense."""

from __future__ import annotations

import contextlib

import tensorflow as tf

from devshim.backends.autodiff_base import Autodiff

__all__ = ["TensorFlowAutodiff"]


def _dense(gradient):
    if isinstance(gradient, tf.IndexedSlices):
        return tf.convert_to_tensor(gradient)
    return gradient


def _gradients(tape, outputs: list, inputs: list, grad_outputs: list, unconnected) -> list:
    if not outputs:
        return [None if unconnected == tf.UnconnectedGradients.NONE else tf.zeros_like(x) for x in inputs]
    found = tape.gradient(outputs, inputs, output_gradients=grad_outputs, unconnected_gradients=unconnected)
    return [_dense(g) for g in found]


def _taped(f, args, wrt: list, params: list):
    """The inputs among `args` that `wrt` selects, and `params`; the tape watching them while
    it records `f(*args)`; and `f`'s outputs."""
    targets = [x for x, w in zip(args, wrt) if w] + list(params)
    with tf.GradientTape(watch_accessed_variables=False) as tape:
        for x in targets:
            tape.watch(x)
        outputs = f(*args)
    return targets, tape, outputs


class TensorFlowAutodiff(Autodiff):
    """`tape.gradient` of `f`'s outputs with respect to its inputs.

    Example:
        >>> outputs, pullback = TensorFlowAutodiff().vjp(lambda x: [tf.exp(x)], (tf.zeros(2),), [True])
        >>> pullback([tf.ones(2)])
        [<tf.Tensor: shape=(2,), dtype=float32, numpy=array([1., 1.], dtype=float32)>]
    """

    def vjp(self, f, inputs: tuple, wrt: list, params: list = ()):
        targets, tape, outputs = _taped(f, inputs, wrt, params)

        def pullback(grad_outputs: list) -> list:
            found = iter(_gradients(tape, list(outputs), targets, list(grad_outputs), tf.UnconnectedGradients.NONE))
            return [next(found) if w else None for w in wrt] + list(found)

        return outputs, pullback

    def gradient_function(self, f, count: int, wrt: list, params: list = ()):
        def first_order(*arguments) -> list:
            xs, gys = list(arguments[:count]), list(arguments[count:])
            targets, tape, ys = _taped(f, xs, wrt, params)
            return _gradients(tape, list(ys), targets, gys, tf.UnconnectedGradients.ZERO)

        return first_order

    def copy_like(self, x, fresh):
        if isinstance(x, tf.Variable):
            with tf.device(fresh.device):
                return tf.Variable(fresh, trainable=x.trainable)
        return fresh

    @contextlib.contextmanager
    def full_precision(self):
        enabled = tf.config.experimental.tensor_float_32_execution_enabled()
        tf.config.experimental.enable_tensor_float_32_execution(False)
        try:
            yield
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(enabled)

    def can_change_in_place(self, x) -> bool:
        return isinstance(x, tf.Variable)

    def set_element(self, x, index: tuple, value: float) -> None:
        with tf.device(x.device):
            if not index:
                x.assign(tf.constant(value, dtype=x.dtype))
            else:
                x.scatter_nd_update([list(index)], tf.constant([value], dtype=x.dtype))

    def assign(self, x, fresh) -> None:
        with tf.device(x.device):
            x.assign(fresh)

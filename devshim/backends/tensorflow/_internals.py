"""The private TensorFlow and Keras names the tensorflow backend uses, each behind a probe
(`devshim.backends.probes`).

The backend's modules ask these probes and name no internal themselves. Each probe says
which feature needs the name and what that feature does without it; on a release that
moved one, its first use issues one `FrameworkInternalWarning`. The canary tests
(`tests/test_internals.py`) fail in CI the day a release moves one.

The transfer guard's (`guard.py`) are TensorFlow's own Python-level entry points, which TF's
public API (`tf.*`) does not expose: the eager tensor's one reading method, the eager tensor
class, and the two functions every eager op goes through.
"""

from __future__ import annotations

from functools import partial

from devshim.backends.probes import Internals, Slot, dotted

#: The TensorFlow releases devshim's CI tests (tox envs tensorflow-floor and tensorflow).
TESTED = "2.16 to 2.21 (Keras 3)"

INTERNALS = Internals("tensorflow", title="TensorFlow", tested=TESTED)
_add_keras = partial(INTERNALS.add, framework="keras", since=(3, 0))  # Keras 3's internals


def _variable_initialize():
    from keras.src.backend.tensorflow.core import Variable

    if not callable(getattr(Variable, "_initialize", None)):
        raise TypeError("keras's TensorFlow Variable has no _initialize method")
    return Variable._initialize


def _eager_numpy():
    from tensorflow.python.framework import ops

    if not callable(vars(ops._EagerTensorBase)["_numpy"]):
        raise TypeError("tensorflow.python.framework.ops._EagerTensorBase._numpy is no longer a method")
    return Slot(ops._EagerTensorBase, "_numpy")


def _eager_tensor():
    from tensorflow.python.framework import ops

    if not isinstance(ops.EagerTensor, type):
        raise TypeError("tensorflow.python.framework.ops.EagerTensor is no longer a class")
    return ops.EagerTensor


def _op_entry_points():
    from tensorflow.python import pywrap_tfe
    from tensorflow.python.eager import context

    context.Context.device_name  # noqa: B018 - the op's device scope, read from the fast path's ctx
    names = ("TFE_Py_FastPathExecute", "TFE_Py_Execute")
    for name in names:
        if not callable(getattr(pywrap_tfe, name)):
            raise TypeError(f"tensorflow.python.pywrap_tfe.{name} is not callable")
    return tuple(Slot(pywrap_tfe, name) for name in names)


def _print_frames():
    from tensorflow.python.framework import ops

    names = [name for name in ("value_text", "numpy_text") if callable(getattr(ops, name, None))]
    if not names:
        raise AttributeError("tensorflow.python.framework.ops has neither value_text nor numpy_text")
    if hasattr(ops.EagerTensor, "_summarize_value"):
        names.append("_summarize_value")  # format(t) calls it
    return frozenset(names)


def _autograph_rules():
    from tensorflow.python.autograph.core import config

    if not isinstance(config.CONVERSION_RULES, tuple) or not callable(getattr(config, "DoNotConvert", None)):
        raise TypeError("tensorflow.python.autograph.core.config has no CONVERSION_RULES tuple and DoNotConvert rule")

    def leave_alone(package: str) -> None:
        """Make AutoGraph call `package`'s functions as written, as it calls NumPy's and Keras's."""
        rules = config.CONVERSION_RULES
        if not any(isinstance(rule, config.DoNotConvert) and rule.matches(package) for rule in rules):
            config.CONVERSION_RULES = (config.DoNotConvert(package),) + rules

    return leave_alone


_OPS = "the transfer guard's checks of eager ops' inputs (an input on another device than the op's)"
_OPS_FALLBACK = ("op inputs on other devices are not seen: TensorFlow copies them without a word "
                 "(host reads are still checked).")

EAGER_NUMPY = INTERNALS.add(
    "tensorflow.python.framework.ops._EagerTensorBase._numpy",
    feature="the transfer guard's checks of host reads (t.numpy(), float(t), np.asarray(t), print(t))",
    fallback="host reads of tensors on a GPU are not seen by the guard (TensorFlow copies them).",
    find=_eager_numpy,
)
EAGER_TENSOR = INTERNALS.add(
    "tensorflow.python.framework.ops.EagerTensor",
    feature=_OPS,
    fallback=_OPS_FALLBACK,
    find=_eager_tensor,
)
OP_ENTRY_POINTS = INTERNALS.add(
    "tensorflow.python.pywrap_tfe.TFE_Py_FastPathExecute",
    feature=_OPS + " (with TFE_Py_Execute and the eager context's device_name)",
    fallback=_OPS_FALLBACK,
    find=_op_entry_points,
)
PRINT_FRAMES = INTERNALS.add(
    "tensorflow.python.framework.ops.value_text",
    feature="the transfer guard naming a host read made by print(t) or repr(t) as such",
    fallback="the guard's message names such a read \"reading t on the host\".",
    find=_print_frames,
)
COMPOSITE_TENSOR = INTERNALS.add(
    "tf.__internal__.CompositeTensor",
    feature="moving composite tensors (tf.RaggedTensor, tf.SparseTensor, tf.IndexedSlices) part by part",
    fallback="composite tensors are not taken as tensors: move their component tensors yourself.",
    find=dotted("tensorflow.__internal__.CompositeTensor"),
)
AUTOGRAPH_RULES = INTERNALS.add(
    "tensorflow.python.autograph.core.config.CONVERSION_RULES",
    feature="devshim's functions inside a tf.function running as written (AutoGraph rewrites the Python "
            "of the functions a tf.function calls, but NumPy's, Keras's and, with this, devshim's)",
    fallback="AutoGraph rewrites devshim's functions called inside a tf.function, which can fail there: "
             "call them outside it, or as tf.autograph.experimental.do_not_convert(ds.to_device)(x, device).",
    find=_autograph_rules,
)
KERAS_FUNCTIONAL = _add_keras(
    "keras.src.models.functional.Functional",
    feature="ds.place_model / ds.replicate cloning functional Keras models (keras.Model(inputs, outputs))",
    fallback="functional models are refused like subclassed ones (UnsupportedPlacementError); "
             "keras.Sequential models are still cloned.",
    find=dotted("keras.src.models.functional.Functional"),
)
KERAS_MAYBE_BUILD = _add_keras(
    "keras.layers.Layer._maybe_build",
    feature="ds.place_model of an unbuilt Keras model, built on its first call under the device",
    fallback="only the model's build() and call() run under the device (a model that builds its weights "
             "in call() under tf.init_scope builds them on the default device): pass input_shape= to "
             "ds.place_model to build it there at once.",
    find=dotted("keras.layers.Layer._maybe_build"),
)
KERAS_VARIABLE_INITIALIZE = _add_keras(
    "keras.src.backend.tensorflow.core.Variable._initialize",
    feature="moving an optimiser made before ds.place_model to the placed Keras model's device (its "
            "variables are made anew there, with their values, when the model is compiled or trained)",
    fallback="such an optimiser's variables stay where they were made: compile the placed model with an "
             "optimiser's name (optimizer=\"adam\"), or make the optimiser under keras.device(device).",
    find=_variable_initialize,
)

__all__ = ["INTERNALS", "TESTED", "EAGER_NUMPY", "EAGER_TENSOR", "OP_ENTRY_POINTS", "PRINT_FRAMES", "COMPOSITE_TENSOR",
           "AUTOGRAPH_RULES", "KERAS_FUNCTIONAL", "KERAS_MAYBE_BUILD", "KERAS_VARIABLE_INITIALIZE"]

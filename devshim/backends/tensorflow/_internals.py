"""The private TensorFlow and Keras names the tensorflow backend uses, each behind a probe
(``devshim.backends.probes``).

The backend's modules ask these probes and name no internal themselves. Each probe says
which feature needs the name and what that feature does without it; on a release that
moved one, its first use issues one ``FrameworkInternalWarning``. The canary tests
(``tests/test_internals.py``) fail in CI the day a release moves one.

To move here in round two (issue 27; still used where they are):

========  ====  =========================================================  ====================
file      line  name                                                       feature
========  ====  =========================================================  ====================
guard.py  26    tensorflow.python.pywrap_tfe (TFE_Py_Execute,              transfer guard: ops
                TFE_Py_FastPathExecute, wrapped)
guard.py  27    tensorflow.python.framework.ops                            transfer guard
guard.py  56    ops._EagerTensorBase (its ``_numpy``, wrapped)             transfer guard: reads
guard.py  57    ops.EagerTensor                                            transfer guard
========  ====  =========================================================  ====================
"""

from __future__ import annotations

from devshim.backends.probes import Internals

#: The TensorFlow releases devshim's CI tests (tox envs tensorflow-floor and tensorflow).
TESTED = "2.16 to 2.21 (Keras 3)"

INTERNALS = Internals("tensorflow", title="TensorFlow", tested=TESTED)


def _composite_tensor():
    import tensorflow as tf

    return tf.__internal__.CompositeTensor


def _functional():
    from keras.src.models.functional import Functional

    return Functional


def _maybe_build():
    import keras

    keras.layers.Layer._maybe_build  # noqa: B018 - the method devshim wraps
    return "_maybe_build"


COMPOSITE_TENSOR = INTERNALS.add(
    "tf.__internal__.CompositeTensor",
    feature="moving composite tensors (tf.RaggedTensor, tf.SparseTensor, tf.IndexedSlices) part by part",
    fallback="composite tensors are not taken as tensors: move their component tensors yourself.",
    find=_composite_tensor,
)
KERAS_FUNCTIONAL = INTERNALS.add(
    "keras.src.models.functional.Functional",
    feature="ds.place_model / ds.replicate cloning functional Keras models (keras.Model(inputs, outputs))",
    fallback="functional models are refused like subclassed ones (UnsupportedPlacementError); "
             "keras.Sequential models are still cloned.",
    find=_functional,
    framework="keras",
    since=(3, 0),
)
KERAS_MAYBE_BUILD = INTERNALS.add(
    "keras.layers.Layer._maybe_build",
    feature="ds.place_model of an unbuilt Keras model, built on its first call under the device",
    fallback="only the model's build() is run under the device: pass input_shape= to ds.place_model "
             "to build it there at once.",
    find=_maybe_build,
    framework="keras",
    since=(3, 0),
)

__all__ = ["INTERNALS", "TESTED", "COMPOSITE_TENSOR", "KERAS_FUNCTIONAL", "KERAS_MAYBE_BUILD"]

"""Placing Keras 3 models (TensorFlow backend): build on the device, or clone there; then keep
their calls there.

Keras creates a layer's weights when the layer is built, on the device scope in
force at that moment, and TensorFlow cannot move a variable afterwards. So:

- an unbuilt model is built under the target device when `input_shape=` (or
  the model itself) gives the shape; without one (D2L's
  `keras.Sequential([keras.layers.Dense(1)])`) it is placed for its first
  call, which builds it under the device;
- a built model already there is returned as it is;
- a built `Sequential` or functional model (`keras.Model(inputs, outputs)`,
  which Keras 3 returns as a `Functional`) elsewhere is cloned under the
  target device (`keras.models.clone_model`) and given the original's weights
  (`set_weights`). The clone is a new model: the original's optimizer and its
  state are not carried over, so compile the clone. Subclassed models (a class
  of your own deriving from `keras.Model`, functional or not) may hold state a
  clone cannot reproduce, so devshim refuses them and says how to build them on
  the device instead.

Either way the placed model's calls, `compile`, `fit`, `evaluate` and `predict` run under
the device from then on (`devshim.backends.keras_base`), so its outputs and the optimiser's
state are made there too; an optimiser made before is moved there when the model is
compiled or trained (its variables are made anew on the device, with their values).

Splitting a model over devices by hooks is refused: Keras places weights at
build time, per layer, under the scope in force then.

Keras 2 models (`tf_keras`, what `tf.keras` is under `TF_USE_LEGACY_KERAS=1`, and
the `keras` of TensorFlow 2.15 and older) are recognised and refused by name
(`FrameworkReleaseError`): devshim places Keras 3 models.
"""

from __future__ import annotations

import sys

import tensorflow as tf

from devshim.backends import keras_base
from devshim.backends.model_base import ModelPlacement
from devshim.backends.probes import release
from devshim.backends.tensorflow import _internals
from devshim.errors import FrameworkReleaseError


def _keras2_layer(obj):
    """The Keras 2 package (`tf_keras`, or a `keras` older than 3) `obj` is a layer of, or None."""
    for name in ("tf_keras", "keras"):
        module = sys.modules.get(name)
        if module is None or (release(name) or (3,)) >= (3,):
            continue
        layers = getattr(module, "layers", None)
        if layers is not None and isinstance(obj, layers.Layer):
            return f"{name} {module.__version__}"
    return None


class _KerasOnTensorFlow(keras_base.KerasModels):
    """Keras 3 models on TensorFlow: cloned onto another device (TensorFlow cannot move a variable).
    An unbuilt model's first-call build step runs under the device too (`builders`): Keras builds
    through `_maybe_build`, which traces call() in a graph where a device scope entered inside does
    not reach the variables (made under tf.init_scope)."""

    def move_weights(self, model, native, adapter):
        target = adapter.describe(native)
        if {adapter.tensor_device(w.value) for w in model.weights} == {target}:
            return model
        return self.clone(model, native, adapter)

    def move_variable(self, variable, native, adapter) -> bool:
        remake = _internals.KERAS_VARIABLE_INITIALIZE.get()
        if remake is None:
            return False
        with tf.device(native.name):  # Keras makes its tf.Variable anew, here, from the value
            remake(variable, tf.identity(variable.value))
        return True


_KERAS = _KerasOnTensorFlow(_internals)


def _keras3(model) -> _KerasOnTensorFlow:
    """The placement of Keras 3 models, for `model`; a Keras 2 model is refused."""
    package = _keras2_layer(model)
    if package is not None:
        raise FrameworkReleaseError(
            f"This {type(model).__name__} is a Keras 2 model ({package}); devshim places Keras 3 models "
            f"(keras 3.0 or later, TensorFlow 2.16 or later). Build it under the device instead "
            f"(`with ds.try_gpu(): model = ...; model(sample_batch)`), or move to Keras 3: unset "
            f"TF_USE_LEGACY_KERAS and import keras rather than tf_keras."
        )
    return _KERAS


class KerasPlacement(ModelPlacement):
    """Placement of Keras models (the contract: `devshim.backends.model_base.ModelPlacement`).

    Example:
        >>> ds.backends.model_placement("tensorflow").is_model(net)
        True
    """

    def is_model(self, obj) -> bool:
        return (keras_base.is_model(obj) and keras_base.backend() == "tensorflow") or _keras2_layer(obj) is not None

    def named_places(self, model, adapter) -> list:
        return _keras3(model).named_places(model, adapter)

    def place(self, model, native, adapter, input_shape=None):
        return _keras3(model).place(model, native, adapter, input_shape)

    def child_sizes(self, model) -> list:
        return _keras3(model).child_sizes(model)

    def place_map(self, model, natives: dict, adapter):
        return _KERAS.place_map(model, natives, adapter)

    def unplace(self, model) -> None:
        """Take devshim's device off a placed model's calls."""
        _keras3(model).unplace(model)

    def replicate(self, model, natives: list, adapter) -> list:
        return _keras3(model).replicate(model, natives, adapter)

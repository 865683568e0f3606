"""Placing Keras 3 models (TensorFlow backend): build on the device, or clone there.

Keras creates a layer's weights when the layer is built, on the device scope in
force at that moment, and TensorFlow cannot move a variable afterwards. So:

- an unbuilt model is built under the target device (``input_shape=`` tells
  ``place_model`` the shape when Keras cannot know it);
- a built model already there is returned as it is;
- a built model elsewhere is cloned under the target device
  (``keras.models.clone_model``) and given the original's weights
  (``set_weights``). The clone is a new model: the original's optimizer and its
  state are not carried over, so compile the clone. Subclassed models may hold
  state a clone cannot reproduce, so devshim refuses them and says how to build
  them on the device instead.

Splitting a model over devices by hooks is refused: Keras places weights at
build time, per layer, under the scope in force then.
"""

from __future__ import annotations

import sys

import tensorflow as tf

from devshim.backends.model_base import ModelPlacement
from devshim.errors import UnbuiltModelError, UnsupportedPlacementError


def _keras():
    return sys.modules.get("keras")


def _unbuilt(model) -> UnbuiltModelError:
    return UnbuiltModelError(
        f"This {type(model).__name__} is not built, so it has no weights and no device yet. Build it on "
        f"the device: ds.place_model(model, device, input_shape=(None, features)), or call it once on a "
        f"sample batch under `with ds.try_gpu():`, then ask again."
    )


def _clonable(model) -> bool:
    keras = _keras()
    return isinstance(model, keras.Sequential) or type(model) is keras.Model


def _clone(model, native):
    keras = _keras()
    if not _clonable(model):
        raise UnsupportedPlacementError(
            f"This {type(model).__name__} is a subclassed Keras model: it may hold state that "
            f"keras.models.clone_model cannot copy, so devshim will not rebuild it on another device. "
            f"Create it under the device instead (`with ds.try_gpu(): model = {type(model).__name__}(...)`, "
            f"then build it there), or use a Sequential or functional model."
        )
    with tf.device(native.name):
        clone = keras.models.clone_model(model)
        if not clone.built:
            clone.build(model.inputs[0].shape if getattr(model, "inputs", None) else None)
    clone.set_weights(model.get_weights())
    return clone


class KerasPlacement(ModelPlacement):
    """Placement of Keras models (the contract: ``devshim.backends.model_base.ModelPlacement``).

    Example:
        >>> ds.backends.model_placement("tensorflow").is_model(net)
        True
    """

    def is_model(self, obj) -> bool:
        keras = _keras()
        return keras is not None and isinstance(obj, keras.layers.Layer)

    def named_places(self, model, adapter) -> list:
        weights = list(model.weights)
        if not model.built or not weights:
            raise _unbuilt(model)
        return [(w.path, adapter.tensor_device(w.value)) for w in weights]

    def place(self, model, native, adapter, input_shape=None):
        if not model.built or not model.weights:
            if input_shape is None:
                raise _unbuilt(model)
            with tf.device(native.name):
                model.build(input_shape)
            return model
        target = adapter.describe(native)
        if {adapter.tensor_device(w.value) for w in model.weights} == {target}:
            return model
        return _clone(model, native)

    def child_sizes(self, model) -> list:
        return [(layer.name, sum(int(tf.size(w.value)) * w.value.dtype.size for w in layer.weights))
                for layer in getattr(model, "layers", [])]

    def place_map(self, model, natives: dict, adapter):
        raise UnsupportedPlacementError(
            "Keras places a layer's weights when the layer is built, under the device scope in force then, "
            "and TensorFlow cannot move a variable afterwards, so devshim cannot split a built model by hooks. "
            "Build each part under its device (`with ds.gpu(1): part2 = keras.Sequential([...])`) and copy "
            "at the seams with ds.copy_if_needed in your model's call()."
        )

    def unplace(self, model) -> None:
        """Keras models never get devshim hooks: nothing to remove."""

    def replicate(self, model, natives: list, adapter) -> list:
        self.named_places(model, adapter)  # refuses unbuilt models
        return [_clone(model, native) for native in natives]


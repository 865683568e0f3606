"""Placing Keras 3 models (TensorFlow backend): build on the device, or clone there.

Keras creates a layer's weights when the layer is built, on the device scope in
force at that moment, and TensorFlow cannot move a variable afterwards. So:

- an unbuilt model is built under the target device when `input_shape=` (or
  the model itself) gives the shape; without one (D2L's
  `keras.Sequential([keras.layers.Dense(1)])`) it is placed for its first
  call: the device is recorded on the model, its `build` runs under that
  device when the first call builds it, and `model_device` answers the
  recorded device until then and the weights' device from then on;
- a built model already there is returned as it is;
- a built `Sequential` or functional model (`keras.Model(inputs, outputs)`,
  which Keras 3 returns as a `Functional`) elsewhere is cloned under the
  target device (`keras.models.clone_model`) and given the original's weights
  (`set_weights`). The clone is a new model: the original's optimizer and its
  state are not carried over, so compile the clone. Subclassed models (a class
  of your own deriving from `keras.Model`, functional or not) may hold state a
  clone cannot reproduce, so devshim refuses them and says how to build them on
  the device instead.

Splitting a model over devices by hooks is refused: Keras places weights at
build time, per layer, under the scope in force then.

Keras 2 models (`tf_keras`, what `tf.keras` is under `TF_USE_LEGACY_KERAS=1`, and
the `keras` of TensorFlow 2.15 and older) are recognised and refused by name
(`FrameworkReleaseError`): devshim places Keras 3 models.
"""

from __future__ import annotations

import functools
import sys

import tensorflow as tf

from devshim.backends.model_base import ModelPlacement
from devshim.backends.probes import release
from devshim.backends.tensorflow import _internals
from devshim.errors import FrameworkReleaseError, UnbuiltModelError, UnsupportedPlacementError


def _keras():
    """Keras 3, when it is imported (None for none, or for a Keras 2 named `keras`)."""
    keras = sys.modules.get("keras")
    return keras if keras is not None and (release("keras") or (3,)) >= (3,) else None


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


def _keras2_refused(model, package: str) -> FrameworkReleaseError:
    return FrameworkReleaseError(
        f"This {type(model).__name__} is a Keras 2 model ({package}); devshim places Keras 3 models "
        f"(keras 3.0 or later, TensorFlow 2.16 or later). Build it under the device instead "
        f"(`with ds.try_gpu(): model = ...; model(sample_batch)`), or move to Keras 3: unset "
        f"TF_USE_LEGACY_KERAS and import keras rather than tf_keras."
    )


def _unbuilt(model) -> UnbuiltModelError:
    return UnbuiltModelError(
        f"This {type(model).__name__} is not built, so it has no weights and no device yet. Place it "
        f"first: ds.place_model(model, device) (its first call then builds it there), or "
        f"ds.place_model(model, device, input_shape=(None, features)) to build it at once; or call it "
        f"once on a sample batch under `with ds.try_gpu():`, then ask again."
    )


def _clonable(model) -> bool:
    """Sequential models, and functional ones as Keras makes them (not a subclass of them)."""
    keras = _keras()
    functional = _internals.KERAS_FUNCTIONAL.get()  # what keras.Model(inputs, outputs) makes
    return (isinstance(model, keras.Sequential) or type(model) is keras.Model
            or (functional is not None and type(model) is functional))


def _clone(model, native):
    keras = _keras()
    if not _clonable(model):
        raise UnsupportedPlacementError(
            f"This {type(model).__name__} is a subclassed Keras model: it may hold state that "
            f"keras.models.clone_model cannot copy, so devshim will not rebuild it on another device. "
            f"Build it on the device instead: place it before its first call (model = "
            f"{type(model).__name__}(...); ds.place_model(model, device), then call it), or create and call "
            f"it under the device (`with ds.try_gpu(): model = {type(model).__name__}(...); "
            f"model(sample_batch)`); or write it as a keras.Sequential or a functional "
            f"keras.Model(inputs, outputs), which devshim clones."
        )
    with tf.device(native.name):
        clone = keras.models.clone_model(model)
        if not clone.built:
            clone.build(model.inputs[0].shape if getattr(model, "inputs", None) else None)
    clone.set_weights(model.get_weights())
    return clone


_PLACED = "_devshim_first_call_device"  # the native device an unbuilt model is placed on
_ORIGINALS = "_devshim_original_builders"  # {"build": ..., "_maybe_build": ...} while placed
_MISSING = object()


def _builders() -> tuple:
    """The methods that build a model: Keras builds one on its first call through _maybe_build
    (which calls build, or traces call() symbolically when build is Keras's default); a user
    may also call build() directly."""
    maybe_build = _internals.KERAS_MAYBE_BUILD.get()
    return ("build",) if maybe_build is None else (maybe_build, "build")


def _place_for_first_call(model, native):
    """Record `native` and make the model's next build (its first call) run under it."""
    if getattr(model, _ORIGINALS, None) is None:
        builders = _builders()
        originals = {name: vars(model).get(name, _MISSING) for name in builders}
        for name in builders:
            object.__setattr__(model, name, _under_placed_device(model, getattr(model, name)))
        object.__setattr__(model, _ORIGINALS, originals)
    object.__setattr__(model, _PLACED, native)
    return model


def _under_placed_device(model, original):
    @functools.wraps(original)  # Keras reads build's signature and its "is default" mark
    def builder(*args, **kwargs):
        with tf.device(getattr(model, _PLACED).name):
            result = original(*args, **kwargs)
        if model.built:
            _forget_first_call(model)
        return result

    return builder


def _forget_first_call(model) -> None:
    originals = getattr(model, _ORIGINALS, None)
    if originals is not None:
        for name, original in originals.items():
            if original is _MISSING:
                object.__delattr__(model, name)  # the class's method again
            else:
                object.__setattr__(model, name, original)
        object.__setattr__(model, _ORIGINALS, None)


class KerasPlacement(ModelPlacement):
    """Placement of Keras models (the contract: `devshim.backends.model_base.ModelPlacement`).

    Example:
        >>> ds.backends.model_placement("tensorflow").is_model(net)
        True
    """

    def is_model(self, obj) -> bool:
        keras = _keras()
        return (keras is not None and isinstance(obj, keras.layers.Layer)) or _keras2_layer(obj) is not None

    def _refuse_keras2(self, model) -> None:
        package = _keras2_layer(model)
        if package is not None:
            raise _keras2_refused(model, package)

    def named_places(self, model, adapter) -> list:
        self._refuse_keras2(model)
        weights = list(model.weights)
        if not model.built or not weights:
            placed = getattr(model, _PLACED, None)
            if placed is not None and getattr(model, _ORIGINALS, None) is not None:
                return [("(built on its first call)", adapter.describe(placed))]
            raise _unbuilt(model)
        return [(w.path, adapter.tensor_device(w.value)) for w in weights]

    def place(self, model, native, adapter, input_shape=None):
        self._refuse_keras2(model)
        if not model.built or not model.weights:
            if input_shape is None:
                return _place_for_first_call(model, native)
            _forget_first_call(model)
            with tf.device(native.name):
                model.build(input_shape)
            return model
        target = adapter.describe(native)
        if {adapter.tensor_device(w.value) for w in model.weights} == {target}:
            return model
        return _clone(model, native)

    def child_sizes(self, model) -> list:
        self._refuse_keras2(model)
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
        self._refuse_keras2(model)
        if not model.built or not model.weights:
            raise _unbuilt(model)
        return [_clone(model, native) for native in natives]


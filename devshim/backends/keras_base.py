"""Keras 3, the library above three of devshim's frameworks: what their backends' Keras parts share.

Keras 3 runs one model code on TensorFlow, JAX or PyTorch (`KERAS_BACKEND`). It is no backend
of devshim's: a Keras model is a model of the framework Keras runs on, a `keras.Variable` holds
that framework's tensor, and Keras computes on one current device (`keras.device(...)`, else
its default). This module holds what the torch, tensorflow and jax backends share for Keras,
and imports no framework (Keras is read from `sys.modules`):

- `backend()`: the devshim backend Keras runs on (`selection` follows it);
- `VariableAdapter`: Keras variables, moved through their value (`dispatch` gives them to it);
- `KerasModels`: placing Keras models, which each backend's `model.py` completes with how its
  framework moves weights and spells a device for `keras.device`. Keras has no per-model
  device, only its current one, so a placed model's entry points (`build`, `call`, `compile`,
  `fit`, `evaluate`, `predict` and the `*_on_batch` steps) run under `keras.device(its
  device)`: Keras builds, computes and keeps the optimiser's state there.

Example:
    >>> from devshim.backends import keras_base
    >>> keras_base.backend()          # keras imported with KERAS_BACKEND=jax
    'jax'
"""

from __future__ import annotations

import functools
import math
import os
import re
import sys
import types

from devshim import transfer
from devshim.errors import UnbuiltModelError, UnsupportedPlacementError

__all__ = ["keras", "backend", "chosen_backend", "is_model", "is_variable_class", "VariableAdapter", "KerasModels", "ENTRY_POINTS",
           "unbuilt"]

#: The methods of a placed Keras model that run under its device: building, calling, and the
#: trainer's (Keras creates the optimiser's and the metrics' variables inside them).
ENTRY_POINTS = ("build", "call", "compile", "fit", "evaluate", "predict", "train_on_batch", "test_on_batch",
                "predict_on_batch")
_OPTIMISER_FIRST = ("fit", "train_on_batch")  # entry points that may train: the optimiser is placed first
_PLACED = "_devshim_keras_placement"  # a placed model's `_Placed` record
_OWN = "_devshim_keras_own_methods"  # entry point -> what the model itself held there before devshim
_MISSING = object()


def keras():
    """Keras 3 when it is imported (None for none, or for a Keras 2 named `keras`).

    Example:
        >>> keras_base.keras().__version__
        '3.15.1'
    """
    module = sys.modules.get("keras")
    if module is None:
        return None
    found = re.match(r"(\d+)\.", str(getattr(module, "__version__", "3.")))
    return module if found is not None and int(found.group(1)) >= 3 else None


def backend():
    """The name of the framework Keras 3 runs on ("torch", "jax", "tensorflow", "numpy"), or None
    when Keras 3 is not imported (what `keras.backend.backend()` answers; `KERAS_BACKEND` sets it).

    Example:
        >>> keras_base.backend()
        'torch'
    """
    module = keras()
    if module is None:
        return None
    try:
        return str(module.backend.backend())
    except AttributeError:  # a Keras still importing itself
        return None


def chosen_backend():
    """The framework `KERAS_BACKEND` names, Keras's own variable (what the user chose for Keras, as
    opposed to Keras's default), or None when it is unset.

    Example:
        >>> keras_base.chosen_backend()       # KERAS_BACKEND=jax
        'jax'
    """
    return os.environ.get("KERAS_BACKEND", "").strip().lower() or None


def is_model(obj) -> bool:
    """Whether `obj` is a Keras 3 layer or model.

    Example:
        >>> keras_base.is_model(keras.Sequential())
        True
    """
    module = keras()
    return module is not None and isinstance(obj, module.layers.Layer)


def is_variable_class(kind: type) -> bool:
    """Whether `kind` is Keras 3's variable class (`keras.Variable`, whatever Keras runs on).

    Example:
        >>> keras_base.is_variable_class(type(keras.Variable(1.0)))
        True
    """
    module = keras()
    variable = getattr(module, "Variable", None) if module is not None else None
    return isinstance(variable, type) and issubclass(kind, variable)


# ------------------------------------------------------------------ Keras variables


class VariableAdapter:
    """The adapter of Keras variables on one framework: each call is the framework's adapter's,
    on the variable's value (a torch `Parameter`, a JAX array, a `tf.Variable`), as devshim moves
    a `tf.Variable`: a copy is a tensor holding the value, and a variable already on the device is
    itself. A plain tensor of the framework (a shard, a sum) is taken as it is; everything else is
    the framework's adapter's.

    Example:
        >>> ds.device_of(keras.Variable(1.0))     # KERAS_BACKEND=torch
        device(type='cpu')
    """

    def __init__(self, adapter) -> None:
        self.adapter = adapter

    def __getattr__(self, name: str):
        if name == "adapter":  # (not set yet: a copy being made)
            raise AttributeError(name)
        return getattr(self.adapter, name)

    def __repr__(self) -> str:
        return f"<devshim {self.adapter.name} backend, for Keras variables>"

    def tensor_device(self, x):
        return self.adapter.tensor_device(_value(x))

    def native_device_of(self, x):
        return self.adapter.native_device_of(_value(x))

    def same_place(self, x, native) -> bool:
        return self.adapter.same_place(_value(x), native)

    def copy_to(self, x, native, non_blocking: bool):
        return self.adapter.copy_to(_value(x), native, non_blocking)

    def copy_if_needed(self, x, native):
        return x if self.same_place(x, native) else self.copy_to(x, native, False)

    def copier(self, native, non_blocking: bool):
        copy_to = self.copy_to
        return lambda x: copy_to(x, native, non_blocking)

    def tensor_to_numpy(self, x):
        return self.adapter.tensor_to_numpy(_value(x))

    def wait(self, x) -> None:
        self.adapter.wait(_value(x))

    def narrow(self, x, start: int, stop: int):
        return self.adapter.narrow(_value(x), start, stop)

    def device_table(self):
        return None

    def neutral_device_fn(self):
        return self.tensor_device

    def native_device_of_fn(self):
        return self.native_device_of

    def copy_fn(self):
        return self._one_variable(if_needed=False)

    def copy_if_needed_fn(self):
        return self._one_variable(if_needed=True)

    def _one_variable(self, if_needed: bool):
        copy = self.adapter.copy_if_needed_fn() if if_needed else self.adapter.copy_fn()

        def one_variable(x, device, *non_blocking):
            value = x.value
            copied = copy(value, device, *non_blocking)
            return x if copied is value else copied

        return one_variable


def _value(x):
    """A Keras variable's value; any other value as it is."""
    return x.value if is_variable_class(type(x)) else x


# ------------------------------------------------------------------ Keras models


class _Placed:
    """Where a placed Keras model runs: its native device, the spelling `keras.device` takes, the
    backend's `KerasModels` and adapter, and the optimiser last placed (shared by deep copies)."""

    __slots__ = ("native", "spelled", "models", "adapter", "optimiser")

    def __init__(self, native, spelled, models, adapter) -> None:
        self.native, self.spelled, self.models, self.adapter = native, spelled, models, adapter
        self.optimiser = None

    def __deepcopy__(self, memo):
        return self


def _entry_point(name: str, method, builder: bool):
    @functools.wraps(method)  # Keras reads build's and call's signature and build's "is default" mark
    def entry(model, *args, **kwargs):
        placed = vars(model)[_PLACED]
        own = vars(model)[_OWN].get(name, _MISSING)
        original = own if own is not _MISSING else method.__get__(model, type(model))
        with keras().device(placed.spelled):
            if name in _OPTIMISER_FIRST:
                placed.models.place_optimiser(model, placed)
            result = original(*args, **kwargs)
            if name == "compile":
                placed.models.place_optimiser(model, placed)
        if builder and model.built:
            _restore(model, (name,))  # built: a build step of Keras's own has nothing more to do
        return result

    return entry


class KerasModels:
    """Placement of Keras 3 models on one framework; each backend's `model.py` subclasses it
    with how its framework moves them (`move_weights`, `move_variable`) and spells a device
    for `keras.device` (`keras_device`), and calls it for the Keras models it is given.
    `internals` is the backend's `_internals` module, whose probes `KERAS_FUNCTIONAL` and
    `KERAS_MAYBE_BUILD` find Keras's class of functional models and its first-call build step.

    Example:
        >>> models = _KerasOnTorch(_internals)
        >>> models.place(model, torch.device("vgpu", 1), ds.get_backend("torch"))
    """

    def __init__(self, internals) -> None:
        self.internals = internals

    def keras_device(self, native):
        """What `keras.device` takes for `native` (default: `native` itself)."""
        return native

    def move_weights(self, model, native, adapter):
        """The built `model` with every variable on `native`: the same model where the framework
        moves them, else a copy (TensorFlow clones)."""
        raise NotImplementedError

    def move_variable(self, variable, native, adapter) -> bool:
        """Move one variable that is not a model's (an optimiser's) to `native`; False where the
        framework cannot (it stays where it is)."""
        return False

    def computing_device(self, model, adapter):
        """Where Keras runs the calls of `model`, which devshim did not place, as a `ds.Device`, when
        that is not simply where its weights are (torch: Keras's current device; JAX: its default
        device, for weights made uncommitted); None otherwise."""
        return None

    # -------------------------------------------------------------- the contract's methods

    def place(self, model, native, adapter, input_shape=None):
        """`model` on `native`: built there (now with `input_shape`, else on its first call) or
        moved there, its entry points under `keras.device` from now on."""
        if model.built and model.weights:
            model = self.move_weights(model, native, adapter)
        elif input_shape is not None:
            with keras().device(self.keras_device(native)):
                model.build(input_shape)
        placed = _Placed(native, self.keras_device(native), self, adapter)
        _run_under(model, placed)
        self.place_optimiser(model, placed)
        return model

    def named_places(self, model, adapter) -> list:
        """(name, `ds.Device`) of each weight and optimiser variable, and where the model's
        calls run when devshim or Keras says so."""
        placed = vars(model).get(_PLACED)
        weights = list(model.weights)
        if not model.built or not weights:
            if placed is not None:
                return [("(built on its first call)", adapter.describe(placed.native))]
            raise unbuilt(model)
        found = [(w.path, adapter.tensor_device(w.value)) for w in weights]
        optimiser = getattr(model, "optimizer", None)
        if optimiser is not None:
            found += [(f"optimizer: {v.path}", adapter.tensor_device(v.value)) for v in optimiser.variables]
        if placed is not None:
            found.append(("(its calls, placed by ds.place_model)", adapter.describe(placed.native)))
        else:
            computing = self.computing_device(model, adapter)
            if computing is not None:
                found.append(("(its calls: Keras's current device)", computing))
        return found

    def child_sizes(self, model) -> list:
        return [(layer.name, sum(_bytes(w) for w in layer.weights)) for layer in getattr(model, "layers", [])]

    def place_map(self, model, natives: dict, adapter):
        raise UnsupportedPlacementError(
            "Keras places a layer's weights when the layer is built, under the device in force then, and "
            "computes on one device at a time, so devshim cannot split a Keras model by hooks. Build each "
            "part under its device (`with keras.device(ds.try_gpu(1)): part2 = keras.Sequential([...])`) "
            "and copy at the seams with ds.copy_if_needed in your model's call()."
        )

    def unplace(self, model) -> None:
        """Take devshim's device off the model's entry points: it computes on Keras's current device again."""
        _restore(model, tuple(vars(model).get(_OWN, ())))
        vars(model).pop(_OWN, None)
        vars(model).pop(_PLACED, None)

    def replicate(self, model, natives: list, adapter) -> list:
        if not model.built or not model.weights:
            raise unbuilt(model)
        return [self.clone(model, native, adapter) for native in natives]

    # -------------------------------------------------------------- helpers for the backends

    def builders(self) -> tuple:
        """The names of Keras's private methods that build a model on its first call, to run under
        the device too while the model is unbuilt (from the backend's probe; none where it moved)."""
        maybe_build = self.internals.KERAS_MAYBE_BUILD.get()
        return () if maybe_build is None else (maybe_build.__name__,)

    def functional_class(self):
        """Keras's class of functional models (`keras.Model(inputs, outputs)` makes one), from the
        backend's probe of that Keras internal; None where it moved (they are not cloned then)."""
        return self.internals.KERAS_FUNCTIONAL.get()

    def clonable(self, model) -> bool:
        """Whether `keras.models.clone_model` rebuilds `model` faithfully: a `Sequential`, or a
        functional model as Keras makes it (not a subclass of one)."""
        module, functional = keras(), self.functional_class()
        return (isinstance(model, module.Sequential) or type(model) is module.Model
                or (functional is not None and type(model) is functional))

    def clone(self, model, native, adapter):
        """A copy of `model` built on `native` with its weights (no optimiser), placed there."""
        if not self.clonable(model):
            raise _not_clonable(model)
        module = keras()
        with module.device(self.keras_device(native)):
            clone = module.models.clone_model(model)
            if not clone.built:
                clone.build(model.inputs[0].shape if getattr(model, "inputs", None) else None)
            clone.set_weights(model.get_weights())
        _run_under(clone, _Placed(native, self.keras_device(native), self, adapter))
        return clone

    def place_optimiser(self, model, placed) -> None:
        """Move the variables of `model`'s optimiser (made before placement) to its device, once
        per optimiser and variable count."""
        optimiser = getattr(model, "optimizer", None)
        if optimiser is None:
            return
        variables = list(optimiser.variables)
        key = (id(optimiser), len(variables))
        if placed.optimiser == key:
            return
        moved = False
        with transfer.explicit():
            for variable in variables:
                if not placed.adapter.same_place(variable.value, placed.native):
                    moved = self.move_variable(variable, placed.native, placed.adapter) or moved
        if moved:  # Keras's compiled steps may hold the variables they were traced with: trace again
            for name in ("train_function", "test_function", "predict_function"):
                if getattr(model, name, None) is not None:
                    setattr(model, name, None)
        placed.optimiser = key


def _run_under(model, placed: _Placed) -> None:
    """Record `placed` on `model` and make its entry points run under its device (once; Keras's own
    build steps only while the model is unbuilt)."""
    state = vars(model)
    if _OWN not in state:
        builders = () if model.built else placed.models.builders()
        own = {}
        for name in ENTRY_POINTS + builders:
            method = getattr(type(model), name, None)
            if callable(method):
                own[name] = state.get(name, _MISSING)
                object.__setattr__(model, name, types.MethodType(_entry_point(name, method, name in builders), model))
        object.__setattr__(model, _OWN, own)
    object.__setattr__(model, _PLACED, placed)


def _restore(model, names: tuple) -> None:
    """Give `model` back what it held at `names` before devshim's entry points."""
    own = vars(model).get(_OWN, {})
    for name in names:
        if name not in own:
            continue
        held = own.pop(name)
        if held is _MISSING:
            vars(model).pop(name, None)
        else:
            object.__setattr__(model, name, held)


def _bytes(weight) -> int:
    bits = re.search(r"\d+", str(weight.dtype))
    return math.prod(int(extent) for extent in weight.shape) * (int(bits.group(0)) // 8 if bits else 1)


def unbuilt(model) -> UnbuiltModelError:
    """The error for a Keras model asked where it is before it has weights.

    Example:
        >>> raise keras_base.unbuilt(keras.Sequential([keras.layers.Dense(1)]))
    """
    return UnbuiltModelError(
        f"This {type(model).__name__} is not built, so it has no weights and no device yet. Place it "
        f"first: ds.place_model(model, device) (its first call then builds it there), or "
        f"ds.place_model(model, device, input_shape=(None, features)) to build it at once; or build it "
        f"under `with keras.device(ds.try_gpu()):` (call it once on a sample batch), then ask again."
    )


def _not_clonable(model) -> UnsupportedPlacementError:
    name = type(model).__name__
    return UnsupportedPlacementError(
        f"This {name} is a subclassed Keras model: it may hold state that keras.models.clone_model "
        f"cannot copy, so devshim will not rebuild it on another device. Build it on the device instead: "
        f"place it before its first call (model = {name}(...); ds.place_model(model, device), then call "
        f"it), or create and call it under the device (`with keras.device(ds.try_gpu()): model = "
        f"{name}(...); model(sample_batch)`); or write it as a keras.Sequential or a functional "
        f"keras.Model(inputs, outputs), which devshim clones."
    )

"""Placing JAX models: pytrees of parameters (Flax and Haiku keep parameters in nested dicts).

A pytree of `jax.Array` leaves (dicts, lists, tuples, namedtuples, dataclasses:
the nests devshim walks) is a model here. JAX arrays are immutable, so
`place_model` returns a new pytree with every array on the device (the same
pytree, when nothing had to move); `replicate` gives one per device. A
pytree has no forward pass to hook, so splitting one over devices by a device
map is refused: place its parts yourself and copy at the seams.
"""

from __future__ import annotations

import jax

from devshim import _tree
from devshim.backends import keras_base
from devshim.backends.jax import _internals
from devshim.backends.model_base import ModelPlacement
from devshim.backends.nests import copy_nest, copy_nest_if_needed
from devshim.errors import UnbuiltModelError, UnsupportedPlacementError


def _arrays(params) -> list:
    return [(path, leaf) for path, leaf in _tree.iter_leaves(params) if isinstance(leaf, jax.Array)]


class _KerasOnJax(keras_base.KerasModels):
    """Keras 3 models on JAX: each variable given its value on the device."""

    def move_weights(self, model, native, adapter):
        for variable in model.variables:
            self.move_variable(variable, native, adapter)
        return model

    def move_variable(self, variable, native, adapter) -> bool:
        variable.assign(adapter.copy_if_needed(variable.value, native))
        return True

    def computing_device(self, model, adapter):
        if all(getattr(w.value, "committed", True) for w in model.weights):
            return None  # JAX computes where committed arrays are
        default = jax.config.jax_default_device  # (what jax.default_device, keras.device's, sets)
        if default is None or isinstance(default, str):
            default = jax.devices(default)[0]
        return adapter.describe(default)  # where JAX takes uncommitted arrays to compute


_KERAS = _KerasOnJax(_internals)


def _keras(model) -> bool:
    return keras_base.is_model(model) and keras_base.backend() == "jax"


class PytreePlacement(ModelPlacement):
    """Placement of JAX pytrees of arrays (the contract: `devshim.backends.model_base.ModelPlacement`).

    Example:
        >>> ds.backends.model_placement("jax").is_model(net)
        True
    """

    def is_model(self, obj) -> bool:
        return _keras(obj) or (_tree.is_container(obj) and bool(_arrays(obj)))

    def for_model(self, params):
        return _KERAS if _keras(params) else self

    def named_places(self, params, adapter) -> list:
        found = [(path or "<root>", adapter.tensor_device(leaf)) for path, leaf in _arrays(params)]
        if not found:
            raise UnbuiltModelError("This pytree holds no JAX array, so it has no device: nothing to place.")
        return found

    def place(self, params, native, adapter, input_shape=None):
        return copy_nest_if_needed(params, native)

    def child_sizes(self, params) -> list:
        if isinstance(params, dict):
            items = params.items()
        elif isinstance(params, (list, tuple)):
            items = ((str(i), v) for i, v in enumerate(params))
        else:
            return []
        return [(str(key), sum(leaf.nbytes for _, leaf in _arrays(value))) for key, value in items]

    def place_map(self, params, natives: dict, adapter):
        raise UnsupportedPlacementError(
            "A pytree of JAX parameters has no forward pass devshim could hook, so it cannot be split over "
            "devices by a device map. Place each part yourself (params['layer1'] = ds.place_model("
            "params['layer1'], device)) and copy activations at the seams with ds.copy_if_needed."
        )

    def unplace(self, params) -> None:
        """Pytrees never get devshim hooks: nothing to remove."""

    def replicate(self, params, natives: list, adapter) -> list:
        return [copy_nest(params, native, False) for native in natives]


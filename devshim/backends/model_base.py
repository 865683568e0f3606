"""The contract a backend's `model.py` implements: `ModelPlacement`.

A backend package that can place its framework's models (`ds.place_model`
and friends, `devshim/placement.py`) has a `model.py` defining exactly one
subclass of `ModelPlacement`; the registry finds it (`registry.model_placement`).
`model.py` is imported only once the framework is, so it may import the
framework at module level. Every copy it makes runs inside `devshim.transfer`'s
`explicit()` block, opened by `devshim/placement.py`. Where Keras 3 runs on the
framework, `model.py` places Keras models too, with `devshim.backends.keras_base`.

Example:
    >>> placement = ds.backends.model_placement("torch")
    >>> placement.is_model(torch.nn.Linear(2, 1))
    True
"""

from __future__ import annotations

from abc import ABC, abstractmethod

__all__ = ["ModelPlacement"]


class ModelPlacement(ABC):
    """One framework's model placement (the class a backend's `model.py` defines).

    `adapter` arguments are the backend's `Backend`; devices are its native devices.

    Example:
        >>> ds.backends.model_placement("torch").child_sizes(net)
        [('0', 16), ('2', 8)]
    """

    @abstractmethod
    def is_model(self, obj) -> bool:
        """Whether `obj` is a model of this framework."""

    @abstractmethod
    def named_places(self, model, adapter) -> list:
        """(name, `ds.Device`) for each parameter and buffer; `UnbuiltModelError` when it has none yet."""

    @abstractmethod
    def place(self, model, native, adapter, input_shape=None):
        """The model with every parameter and buffer on `native` (the same object where the
        framework moves in place)."""

    @abstractmethod
    def child_sizes(self, model) -> list:
        """(child name, bytes of its parameters) for the top-level children, for `"balanced"`."""

    @abstractmethod
    def place_map(self, model, natives: dict, adapter):
        """Place each named part on its device, copying inputs across the seams; frameworks that
        cannot hook a part's inputs refuse with `UnsupportedPlacementError`."""

    @abstractmethod
    def unplace(self, model) -> None:
        """Remove what `place_map` added (hooks), leaving parameters where they are."""

    @abstractmethod
    def replicate(self, model, natives: list, adapter) -> list:
        """One copy of the model per device, each with its own parameters."""

    def for_model(self, model):
        """The placement that handles `model`, which `is_model` accepted: this one, or the part it
        hands a kind of model to (a backend that carries Keras 3 models returns its `KerasModels`
        for them, whose methods are this contract's).

        Example:
            >>> placement = ds.backends.model_placement("torch")
            >>> placement.for_model(torch.nn.Linear(2, 1)) is placement
            True
        """
        return self

    def keras_imported(self, adapter) -> None:
        """Keras 3 runs on this framework and devshim has just met it (`selection` calls this
        when Keras is imported and its backend is this one): teach Keras devshim's devices where
        it needs it. Nothing by default; the torch backend makes `keras.device` take torch devices.

        Example:
            >>> ds.backends.model_placement("torch").keras_imported(ds.get_backend("torch"))
        """

"""Copying nests of tensors: what `to_device`, `copy_if_needed` and `to_numpy` do
with dicts, lists, tuples, dataclasses and the rest.

This module makes the leaf functions; `devshim._tree.map_nest`, the one walker, is
handed them and rebuilds the nest. Each leaf is copied by the backend that owns it (its
class's `FastPaths` record), with the target device resolved once per backend met in
the nest; the whole walk is one explicit transfer (`devshim.transfer.enter`), and a
device that runs out of memory is named here, from the frameworks the walk met.
Backends' `model.py` modules place pytrees with these too.

Example:
    >>> from devshim.backends.nests import copy_nest
    >>> batch = copy_nest({"x": X, "y": Y}, "gpu:0", False, "to_device")
"""

from __future__ import annotations

from devshim import _device, _tree, transfer
from devshim.backends.dispatch import fast_paths
from devshim.backends.out_of_memory import raise_if_out_of_memory
from devshim.backends.selection import get_backend
from devshim.guard import marker

__all__ = ["copy_nest", "copy_nest_if_needed", "nest_to_numpy"]


def copy_nest(x, device, non_blocking: bool, function=None, skip_keys=None):
    """Every tensor in the nest `x` copied to `device`, in new containers.

    `function` names the public function asking, which its errors name: a value that is
    neither a tensor nor a nest, a device out of memory (None inside another devshim
    operation, which names its own failures: a model's placement). Leaves
    that are no tensor but have a `.to` method (a torch module, a batch object)
    get `leaf.to(device)`, and what it returns is kept. `skip_keys`: mapping
    keys whose values are kept as they are, at any depth.

    Example:
        >>> copy_nest([X], "cpu", False)
        [tensor([1., 1.])]
    """
    targets = _Targets(device)
    return _walk(x, device, function, _copier(targets, non_blocking, False), targets.natives, False, skip_keys)


def copy_nest_if_needed(x, device, function=None, skip_keys=None, non_blocking: bool = False):
    """The nest `x` with the tensors that are not on `device` copied there; a container
    in which nothing had to be copied comes back as itself. `function` as for `copy_nest`.

    Example:
        >>> nest = [X]
        >>> copy_nest_if_needed(nest, "cpu") is nest
        True
    """
    targets = _Targets(device)
    return _walk(x, device, function, _copier(targets, non_blocking, True), targets.natives, True, skip_keys)


def nest_to_numpy(x, function: str = "to_numpy"):
    """Every tensor in the nest `x` copied to a host NumPy array.

    Example:
        >>> nest_to_numpy({"x": X})
        {'x': array([1., 1.], dtype=float32)}
    """

    def leaf_for(value):
        paths = fast_paths(value)
        return None if paths is None else paths.adapter.tensor_to_numpy

    return transfer.explicitly(_tree.map_nest, x, leaf_for, False, None, function)


class _Targets:
    """One call's target device, resolved once per backend met in the nest."""

    __slots__ = ("spec", "natives")

    def __init__(self, spec) -> None:
        self.spec = spec
        self.natives: dict = {}

    def native(self, adapter):
        found = self.natives.get(adapter)
        if found is None:
            found = self.natives[adapter] = adapter.target(self.spec)
        return found


def _mover(targets, non_blocking: bool, value):
    """`leaf -> leaf.to(device)` for a non-tensor leaf with a `.to` method, else None."""
    if not callable(getattr(type(value), "to", None)) or isinstance(value, (str, bytes, type)):
        return None

    def move(leaf):
        native = targets.native(_resolver(targets.spec))
        if non_blocking:
            try:
                return leaf.to(native, non_blocking=True)
            except TypeError:  # a .to without non_blocking
                pass
        return leaf.to(native)

    return move


def _copier(targets: _Targets, non_blocking: bool, if_needed: bool):
    """`leaf_for` of the nest walk: each tensor's copy (`if_needed`: only when not there already)."""
    def leaf_for(value):
        # `fast_paths` asks the class first (`learn_class`, which torch.compile runs outside its
        # trace), so in a compiled function a leaf that is no tensor reads no registry state: Dynamo
        # would guard on that, down to `len(sys.modules)`, and compile again on the next call.
        paths = fast_paths(value)
        if paths is None:
            return _mover(targets, non_blocking, value)
        adapter = paths.adapter
        if not if_needed:
            return adapter.copier(targets.native(adapter), non_blocking)
        native, same_place, copy_to = targets.native(adapter), adapter.same_place, adapter.copy_to
        return lambda leaf: leaf if same_place(leaf, native) else copy_to(leaf, native, non_blocking)

    return leaf_for


def _walk(x, device, function, leaf_for, met: dict, keep_unchanged: bool, skip_keys=None):
    # One tensor (met for the first time), a bare object with a .to method and a nest all go
    # the same way: map_nest maps a lone leaf too, and refuses one it cannot map. `met`: adapter
    # -> its target device, for each framework the walk met.

    def failed(error: BaseException) -> None:  # what the walk is handed to see its errors
        if function is not None:  # a public function's: out of memory named from the frameworks met
            raise_if_out_of_memory(error, function, x, (device,), adapters=tuple(met))

    watched = marker.watchers
    if watched:  # the whole walk is one explicit transfer (nothing to mark while no guard watches)
        transfer.enter()
    try:
        result = _tree.map_nest(x, leaf_for, keep_unchanged, None if skip_keys is None else _tree.skip_set(skip_keys),
                                function, failed)
    finally:
        if watched:
            transfer.leave()
    if not met:
        _resolver(device).target(device)  # no tensor in the nest: the device is still checked
    return result


def _resolver(spec):
    """The backend that resolves `spec` where no tensor says which: a framework's own device
    object is its framework's (`torch.device("meta")` under the jax backend is torch's, which JAX
    could not name), a spec string or a `ds.Device` the selected backend's."""
    if spec is None or isinstance(spec, (str, int, _device.Device)):
        return get_backend()
    from devshim.backends.registry import backend_of_device

    owner = backend_of_device(spec)
    return get_backend() if owner is None else owner

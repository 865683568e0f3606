"""The backends: the device contract, the table of backends, selection and dispatch.

`devshim/backends/<name>/` is one backend (see docs/adapters.md). The modules
here, lowest first:

`spec`       `BackendSpec`, the declaration row each backend package makes;
`virtual`    the one rule for virtual devices on frameworks with host devices to split;
`base`       `Backend`, the device contract every backend's `core.py` implements;
`model_base` `ModelPlacement`, the contract of a backend's `model.py`;
`interop_base` `Interop`, the contract of a backend's `interop.py` (`ds.convert`);
`autodiff_base` `Autodiff`, the contract of a backend's `autodiff.py` (`ds.testing`);
`memory_base` `DeviceMemory`, the contract of a backend's `memory.py` (`ds.memory`);
`keras_base` Keras 3 above torch, JAX and TensorFlow: what their `model.py` share for Keras models;
`registry`   the table built from the rows, and one adapter per backend;
`dispatch`   which backend owns a tensor: one `FastPaths` record per tensor class;
`selection`  which backend functions without a tensor use;
`nests`      the leaf functions that copy nests (`devshim._tree` walks them);
`out_of_memory` the named error for a device out of memory in devshim's own calls.

(A backend's `guard.py` implements `devshim.guard.hooks.GuardHooks`, which
lives with the rest of the guard, below this package.)

This package's namespace gathers their public names, each loaded on first use: the package
imports none of its modules itself (importing one of them never makes it import the rest).

Example:
    >>> ds.backends.get_backend().name
    'torch'
"""

from typing import TYPE_CHECKING

from devshim._lazy import lazy_names

if TYPE_CHECKING:  # what type checkers see; at run time each name loads on first use
    from devshim.backends.base import Backend
    from devshim.backends.dispatch import backend_for_tensor, forget_types, learn_type
    from devshim.backends.registry import (
        accelerator_partner, autodiff, available_backends, backend_names, canonical_name, describe_native_device,
        guard_hooks, interop, load_backend, memory, model_placement, native_for, register_backend, specs,
        unregister_backend, virtual_capable_backends,
    )
    from devshim.backends.selection import get_backend, reset_backend, selection_reason, set_backend, use_backend
    from devshim.backends.spec import BackendSpec

_SUBMODULES = ("spec", "virtual", "base", "model_base", "interop_base", "autodiff_base", "registry", "dispatch",
               "selection", "nests", "memory_base", "out_of_memory")

__all__ = [
    "Backend", "BackendSpec", "specs", "backend_names", "canonical_name", "register_backend",
    "unregister_backend", "load_backend", "available_backends", "describe_native_device", "native_for",
    "virtual_capable_backends", "accelerator_partner", "guard_hooks", "model_placement", "interop",
    "autodiff", "get_backend", "set_backend", "use_backend", "reset_backend", "selection_reason",
    "backend_for_tensor", "learn_type", "forget_types", "memory",
]
# public name -> the module that defines it: the registry, but for the names below.
_EXPORTS = dict.fromkeys(__all__, "devshim.backends.registry")
_EXPORTS.update({
    "Backend": "devshim.backends.base",
    "BackendSpec": "devshim.backends.spec",
    **dict.fromkeys(
        ("get_backend", "set_backend", "use_backend", "reset_backend", "selection_reason"), "devshim.backends.selection"
    ),
    **dict.fromkeys(("backend_for_tensor", "learn_type", "forget_types"), "devshim.backends.dispatch"),
})
__getattr__, __dir__ = lazy_names(globals(), _EXPORTS, _SUBMODULES)

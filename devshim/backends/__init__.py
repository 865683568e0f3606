"""The backends: the device contract, the table of backends, selection and dispatch.

``devshim/backends/<name>/`` is one backend (see docs/adapters.md). The modules
here, lowest first:

``spec``       ``BackendSpec``, the declaration row each backend package makes;
``virtual``    the one rule for virtual devices on frameworks with host devices to split;
``base``       ``Backend``, the device contract every backend's ``core.py`` implements;
``model_base`` ``ModelPlacement``, the contract of a backend's ``model.py``;
``interop_base`` ``Interop``, the contract of a backend's ``interop.py`` (``ds.convert``);
``autodiff_base`` ``Autodiff``, the contract of a backend's ``autodiff.py`` (``ds.testing``);
``registry``   the table built from the rows, and one adapter per backend;
``dispatch``   which backend owns a tensor, and its fast paths;
``selection``  which backend functions without a tensor use.

(A backend's ``guard.py`` implements ``devshim.guard.hooks.GuardHooks``, which
lives with the rest of the guard, below this package.)

This package's namespace gathers their public names.

Example:
    >>> ds.backends.get_backend().name
    'torch'
"""

from __future__ import annotations

from devshim.backends.base import Backend
from devshim.backends.dispatch import (
    COPY, COPY_IF_NEEDED, DEVICE_BY_ATTRIBUTE, DEVICE_OF, DEVICE_TABLE, backend_for_tensor, forget_types, learn_type,
)
from devshim.backends.registry import (
    accelerator_partner, available_backends, backend_names, canonical_name, describe_native_device,
    guard_hooks, interop, load_backend, model_placement, native_for, register_backend, specs, unregister_backend,
    virtual_capable_backends,
)
from devshim.backends.registry import autodiff
from devshim.backends.selection import (
    get_backend, reset_backend, selection_reason, set_backend, use_backend,
)
from devshim.backends.spec import BackendSpec

__all__ = [
    "Backend", "BackendSpec",
    "specs", "backend_names", "canonical_name", "register_backend", "unregister_backend",
    "available_backends", "get_backend", "load_backend", "set_backend", "use_backend",
    "reset_backend", "selection_reason",
    "backend_for_tensor", "describe_native_device", "native_for", "virtual_capable_backends",
    "accelerator_partner", "guard_hooks", "model_placement", "interop", "autodiff",
    "DEVICE_TABLE", "DEVICE_BY_ATTRIBUTE", "DEVICE_OF", "COPY", "COPY_IF_NEEDED", "learn_type", "forget_types",
]

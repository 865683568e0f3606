"""torch's device-generic tests (`instantiate_device_type_tests`) on virtual GPUs.

torch's `torch.testing._internal.common_device_type` makes one test class per device type
it finds when it is imported: the CPU, CUDA when `torch.cuda.is_available()`, and the
out-of-tree device (`PrivateUse1TestBase`) when that device's `is_available()` is True.
A virtual GPU's `is_available()` answers False, as the CPU machine it runs on does, so that
the rest of torch keeps its CPU paths (`DataLoader(pin_memory=True)`, which would ask the
device for page-locked memory a Python-defined device cannot give; `torch.utils.benchmark`,
which would ask it to synchronise). torch's documented way for a downstream device to join
is the variable `TORCH_TEST_DEVICES`: paths of files, each run with the module's globals,
whose `TEST_CLASS` is added to the test bases. This module is such a file: run that way it
hands torch `PrivateUse1TestBase`, the base torch keeps for an out-of-tree device, whose
tests then run on `vgpu:0` (and multi-device tests, `@deviceCountAtLeast(2)`, on every
virtual GPU). `enable` (`ds.testing.torch_device_tests()`) sets the variable.

Nothing in torch is patched. torch reads two things when its testing modules are imported,
so the virtual GPUs must be registered before that: `NATIVE_DEVICES` (tests marked
`@onlyNativeDeviceTypes` run on those; it names the out-of-tree device under its name at
that moment) and the test bases.

Example:
    >>> ds.testing.torch_device_tests(2)   # in conftest.py, before torch's testing modules
    >>> from torch.testing._internal.common_device_type import instantiate_device_type_tests
"""

from __future__ import annotations

import os
import sys

from devshim import settings
from devshim.backends.torch import _internals
from devshim.backends.torch._names import VIRTUAL_TYPE
from devshim.errors import BackendError

__all__ = ["enable", "VARIABLE"]

#: torch's variable naming files that add device types to its device-generic tests.
VARIABLE = "TORCH_TEST_DEVICES"
# torch's device-generic test framework (modules of torch's own test suite); None on a torch without it.
_UTILS, _DEVICE_TYPE = _internals.DEVICE_TEST_MODULES.get() or (None, None)


def _too_late(what: str) -> BackendError:
    return BackendError(
        f"torch's device-generic test framework cannot take devshim's virtual GPUs in this process: "
        f"{what}. Register them first: call ds.testing.torch_device_tests() in conftest.py (or at the "
        f"top of the test module) before anything imports {_DEVICE_TYPE}, with the torch backend "
        f"selected (DEVSHIM_BACKEND=torch) and virtual GPUs asked for ({settings.VIRTUAL_DEVICES_VAR}=2)."
    )


def _register_virtual_gpus() -> None:
    """Make sure torch has the `vgpu` device (`ds.num_gpus` registers it when asked for)."""
    import torch

    from devshim.backends import get_backend

    if _UTILS is None:
        raise BackendError(
            f"this torch ({torch.__version__}) has no device-generic test framework (the modules "
            f"torch's own tests import): install the torch release the tests you run were written for.")
    backend_name = _internals.PRIVATEUSE1_NAME.get()
    if backend_name() != VIRTUAL_TYPE:
        get_backend("torch").devices()
    if backend_name() != VIRTUAL_TYPE:
        raise _too_late(f"no virtual GPUs were asked for ({settings.VIRTUAL_DEVICES_VAR} is unset or 0)")


def _check_native(native_devices) -> None:
    if VIRTUAL_TYPE not in native_devices:
        raise _too_late(f"{_UTILS} was imported before the virtual GPUs were registered, so its "
                        f"NATIVE_DEVICES does not name {VIRTUAL_TYPE!r} and @onlyNativeDeviceTypes "
                        f"tests would be skipped on them")


def enable(count: int | None = None) -> None:
    """Run torch's device-generic tests (`instantiate_device_type_tests`) on virtual GPUs too:
    register `count` virtual GPUs (default: `DEVSHIM_VIRTUAL_DEVICES`) and name this file in
    `TORCH_TEST_DEVICES`. Call it before `torch.testing._internal` is imported.

    Example:
        >>> enable(2)
        >>> os.environ["TORCH_TEST_DEVICES"].endswith("device_tests.py")
        True
    """
    if count is not None:
        settings.set_virtual_devices(count)
        os.environ[settings.VIRTUAL_DEVICES_VAR] = str(count)  # for interpreters the tests start
    _register_virtual_gpus()
    if _UTILS in sys.modules:
        _check_native(sys.modules[_UTILS].NATIVE_DEVICES)
    paths = [path for path in os.environ.get(VARIABLE, "").split(":") if path]
    if __file__ not in paths:
        if _DEVICE_TYPE in sys.modules:
            raise _too_late(f"{_DEVICE_TYPE} was imported already, and it reads {VARIABLE} once")
        os.environ[VARIABLE] = ":".join([*paths, __file__])


def _test_class(framework_globals: dict):
    """What this file gives torch when run as `TORCH_TEST_DEVICES` asks: the base torch keeps
    for an out-of-tree device, the virtual GPUs being registered and native to the framework."""
    _register_virtual_gpus()
    _check_native(framework_globals["NATIVE_DEVICES"])
    return framework_globals["PrivateUse1TestBase"]


if "PrivateUse1TestBase" in globals():  # run by common_device_type (TORCH_TEST_DEVICES)
    TEST_CLASS = _test_class(globals())

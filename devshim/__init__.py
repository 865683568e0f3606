"""devshim: one device API for PyTorch, TensorFlow, JAX, MXNet, CuPy and NumPy.

    >>> import devshim as ds                       # imports no framework
    >>> X = torch.ones(2, 3, device=ds.try_gpu())  # GPU 0 if present, else CPU
    >>> Z = ds.to_device(X, ds.try_gpu(1))         # explicit copy, always
    >>> ds.copy_if_needed(Z, ds.try_gpu(1)) is Z   # already there
    True

Importing devshim imports no framework, and none of devshim's own modules
either: each public name is loaded the first time it is used, and each
framework the first time a function needs it.
"""

from __future__ import annotations

__version__ = "0.1.0"

# What type checkers and IDEs see; at run time each name loads on first use. TYPE_CHECKING is
# spelt here rather than imported from typing, whose import would take most of `import devshim`.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from devshim import backends, settings, testing
    from devshim._device import Device
    from devshim.api import (
        copy_if_needed, cpu, device, device_of, devices, ensure_same_device, gpu, neutral_device, num_gpus,
        same_device, to_device, to_numpy, try_all_gpus, try_gpu,
    )
    from devshim.backends import available_backends, get_backend, set_backend, use_backend
    from devshim.conversion import convert
    from devshim.distributed import ProcessInfo, init_distributed, process_info
    from devshim.errors import (
        BackendError, BatchSplitError, BenchUsageError, CopyRequiredError, CrossDeviceConversionError,
        DatalessTensorError, DeviceMismatchError, DeviceUnavailableError, DevshimError, DevshimWarning,
        ExperimentError, FirstCallInTraceError, GuardBlockInUseError, ImplicitTransferError,
        ImplicitTransferWarning, InvalidDeviceError, InvalidGuardLevelError, LauncherEnvironmentError,
        MixedArrayModulesError, MixedFrameworksError, MultiDeviceValueError, NestCycleError, NotAModelError,
        NotATensorError, NotOnHostError, PlotUnavailableError, ReduceMismatchError, SharedDeviceWarning,
        TimingError, UnbuiltModelError, UnknownSubmoduleError, UnplacedTensorError, UnsupportedDtypeError,
        UnsupportedPlacementError, UnsupportedValueError, VirtualDataParallelError, VirtualDeviceCountError,
        NotCloseError, GradientMismatchError, NoAutodiffError, ImmutableInputError, GradientCheckUsageError,
        FrameworkReleaseError, FrameworkInternalWarning, VirtualDLPackError, TorchCompileReleaseError,
        NondifferentiableError, InputMutatedError, GradientFunctionError, ToleranceError,
        VirtualBesideRealGpuWarning, PrecisionWarning, BackendPluginWarning, KerasBackendMismatchError,
    )
    from devshim.generic import array_module, get_array_module
    from devshim.guard import TransferReport
    from devshim.guard_block import transfer_guard
    from devshim.placement import (
        allreduce, model_device, model_devices, place_model, replicate, split_batch, unplace,
    )
    from devshim.timing import Measurement, Timer, benchmark, synchronize
    from devshim.device_memory import MemoryInfo, MemoryPeak, memory, memory_peak
    from devshim.errors import DeviceOutOfMemoryError, VirtualMemorySizeError
    from devshim.device_memory import BatchSearch, MemoryEstimate, estimate_memory, largest_batch
    from devshim.errors import MemoryEstimateError, MemoryEstimateUnsupportedError, VirtualMemoryWithoutDevicesWarning

_SUBMODULES = ("api", "backends", "bench", "conversion", "distributed", "errors", "generic", "guard", "placement",
               "selftest", "settings", "testing", "timing", "transfer")

# Spelt out so type checkers read it (_EXPORTS is built from it); tests/test_packaging.py checks both agree.
__all__ = [
    "cpu", "gpu", "num_gpus", "try_gpu", "try_all_gpus", "devices", "device", "device_of",
    "neutral_device", "to_device", "copy_if_needed", "same_device", "ensure_same_device", "to_numpy",
    "available_backends", "get_backend", "set_backend", "use_backend", "Device", "convert",
    "array_module", "get_array_module", "synchronize", "Timer", "benchmark", "Measurement",
    "transfer_guard", "TransferReport", "place_model", "model_device", "model_devices", "unplace",
    "split_batch", "replicate", "allreduce", "process_info", "init_distributed", "ProcessInfo",
    "DevshimError", "BackendError", "InvalidDeviceError", "DeviceUnavailableError",
    "DeviceMismatchError", "ImplicitTransferError", "CrossDeviceConversionError", "CopyRequiredError",
    "InvalidGuardLevelError", "NotATensorError", "NestCycleError", "NotAModelError",
    "UnbuiltModelError", "UnsupportedPlacementError", "BatchSplitError", "ReduceMismatchError",
    "MixedFrameworksError", "UnknownSubmoduleError", "GuardBlockInUseError", "UnsupportedDtypeError",
    "UnsupportedValueError", "DatalessTensorError", "NotOnHostError", "UnplacedTensorError",
    "FirstCallInTraceError", "MultiDeviceValueError", "MixedArrayModulesError", "TimingError",
    "ExperimentError", "BenchUsageError", "PlotUnavailableError", "LauncherEnvironmentError",
    "VirtualDeviceCountError", "VirtualDataParallelError", "VirtualDLPackError",
    "FrameworkReleaseError", "TorchCompileReleaseError", "DevshimWarning", "ImplicitTransferWarning",
    "SharedDeviceWarning", "FrameworkInternalWarning", "NotCloseError", "GradientMismatchError",
    "NoAutodiffError", "ImmutableInputError", "GradientCheckUsageError", "NondifferentiableError",
    "InputMutatedError", "GradientFunctionError", "ToleranceError", "VirtualBesideRealGpuWarning",
    "PrecisionWarning", "BackendPluginWarning", "KerasBackendMismatchError",
    "memory", "memory_peak", "MemoryInfo", "MemoryPeak", "DeviceOutOfMemoryError", "VirtualMemorySizeError",
    "estimate_memory", "largest_batch", "MemoryEstimate", "BatchSearch",
    "MemoryEstimateError", "MemoryEstimateUnsupportedError", "VirtualMemoryWithoutDevicesWarning",
    "testing", "settings", "backends",
]

# public name -> the module that defines it; loaded on first attribute access (PEP 562). In
# __all__'s order; every error and warning class is defined in devshim.errors, the others where
# _DEFINED_IN says.
_DEFINED_IN = {
    "devshim.api": ("cpu", "gpu", "num_gpus", "try_gpu", "try_all_gpus", "devices", "device", "device_of",
                    "neutral_device", "to_device", "copy_if_needed", "same_device", "ensure_same_device", "to_numpy"),
    "devshim.backends": ("available_backends", "get_backend", "set_backend", "use_backend"),
    "devshim._device": ("Device",),
    "devshim.conversion": ("convert",),
    "devshim.generic": ("array_module", "get_array_module"),
    "devshim.timing": ("synchronize", "Timer", "benchmark", "Measurement"),
    "devshim.guard_block": ("transfer_guard",),
    "devshim.guard.report": ("TransferReport",),
    "devshim.placement": ("place_model", "model_device", "model_devices", "unplace", "split_batch", "replicate",
                          "allreduce"),
    "devshim.distributed": ("process_info", "init_distributed", "ProcessInfo"),
    "devshim.device_memory": ("memory", "memory_peak", "MemoryInfo", "MemoryPeak", "estimate_memory", "largest_batch",
                              "MemoryEstimate", "BatchSearch"),
}
_EXPORTS = dict.fromkeys([name for name in __all__ if name not in _SUBMODULES], "devshim.errors")
_EXPORTS.update({name: module for module, names in _DEFINED_IN.items() for name in names})


def __getattr__(name: str) -> Any:
    # The one loader of lazy names is devshim._lazy (imported here, on first use, so that
    # `import devshim` loads none of devshim's modules).
    from devshim._lazy import load

    return load(globals(), _EXPORTS, _SUBMODULES, name)


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))

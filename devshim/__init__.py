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

__version__ = "0.1.0"

# public name -> the module that defines it; loaded on first attribute access (PEP 562).
_EXPORTS = {
    **dict.fromkeys(
        ("cpu", "gpu", "num_gpus", "try_gpu", "try_all_gpus", "devices", "device", "device_of", "neutral_device",
         "to_device", "copy_if_needed", "same_device", "ensure_same_device", "to_numpy"),
        "devshim.api",
    ),
    **dict.fromkeys(
        ("available_backends", "get_backend", "set_backend", "use_backend"), "devshim.backends"
    ),
    "Device": "devshim._device",
    "convert": "devshim.conversion",
    **dict.fromkeys(("array_module", "get_array_module"), "devshim.generic"),
    **dict.fromkeys(("synchronize", "Timer", "benchmark", "Measurement"), "devshim.timing"),
    **dict.fromkeys(("transfer_guard", "TransferReport"), "devshim.guard"),
    **dict.fromkeys(
        ("place_model", "model_device", "model_devices", "unplace", "split_batch", "replicate",
         "allreduce"),
        "devshim.placement",
    ),
    **dict.fromkeys(("process_info", "init_distributed", "ProcessInfo"), "devshim.distributed"),
    **dict.fromkeys(
        ("DevshimError", "BackendError", "InvalidDeviceError", "DeviceUnavailableError",
         "DeviceMismatchError", "ImplicitTransferError", "CrossDeviceConversionError", "CopyRequiredError", "InvalidGuardLevelError", "NotATensorError", "NestCycleError",
         "NotAModelError", "UnbuiltModelError", "UnsupportedPlacementError", "BatchSplitError",
         "ReduceMismatchError", "MixedFrameworksError", "UnknownSubmoduleError", "GuardBlockInUseError",
         "UnsupportedDtypeError", "UnsupportedValueError", "DatalessTensorError", "NotOnHostError", "UnplacedTensorError",
         "FirstCallInTraceError",
         "MultiDeviceValueError", "MixedArrayModulesError", "TimingError", "ExperimentError",
         "BenchUsageError", "PlotUnavailableError", "LauncherEnvironmentError", "VirtualDeviceCountError",
         "VirtualDataParallelError", "VirtualDLPackError", "DevshimWarning",
         "ImplicitTransferWarning", "SharedDeviceWarning"),
        "devshim.errors",
    ),
}
_SUBMODULES = ("api", "backends", "bench", "conversion", "distributed", "errors", "generic", "guard", "placement", "selftest",
               "settings",
               "testing", "timing", "transfer")

__all__ = list(_EXPORTS) + ["testing", "settings", "backends"]


def __getattr__(name):
    import importlib

    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"devshim.{name}")
    else:
        raise AttributeError(f"module 'devshim' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))

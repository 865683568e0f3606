"""devshim: one device API for PyTorch, TensorFlow, MXNet, JAX and NumPy.

    >>> import devshim as ds                       # imports no framework
    >>> X = torch.ones(2, 3, device=ds.try_gpu())  # GPU 0 if present, else CPU
    >>> Z = ds.to_device(X, ds.try_gpu(1))         # explicit copy, always
    >>> ds.copy_if_needed(Z, ds.try_gpu(1)) is Z   # already there
    True

Importing devshim imports no framework; each is imported the first time a
function needs it.
"""

from devshim.api import (
    copy_if_needed,
    cpu,
    device,
    device_of,
    devices,
    ensure_same_device,
    gpu,
    num_gpus,
    same_device,
    to_device,
    to_numpy,
    try_all_gpus,
    try_gpu,
)
from devshim import testing
from devshim.backends import available_backends, get_backend, set_backend, use_backend
from devshim.device import Device
from devshim.timing import Measurement, Timer, benchmark, synchronize
from devshim.errors import (
    BackendError,
    DeviceMismatchError,
    DeviceUnavailableError,
    DevshimError,
    InvalidDeviceError,
    NotATensorError,
)

__version__ = "0.1.0"

__all__ = [
    "Device", "testing",
    "available_backends", "get_backend", "set_backend", "use_backend",
    "cpu", "gpu", "num_gpus", "try_gpu", "try_all_gpus", "devices", "device",
    "device_of", "to_device", "copy_if_needed", "same_device", "ensure_same_device", "to_numpy",
    "DevshimError", "BackendError", "InvalidDeviceError", "DeviceUnavailableError",
    "DeviceMismatchError", "NotATensorError",
    "synchronize", "Timer", "benchmark", "Measurement",
]

"""apistrict's device contract, in the array API's own calls: `x.device`, `asarray(x, device=...,
copy=True)`, and the namespace's `__array_namespace_info__().devices()`."""

from __future__ import annotations

from devshim import settings
from devshim.backends import virtual
from devshim.backends.base import Backend
from devshim._device import Device
from devshim.errors import DeviceUnavailableError

from devshim_apistrict import SPEC


class ApiStrictBackend(Backend):
    """array_api_strict's arrays on its CPU, and on its two test devices as virtual GPUs.

    Example:
        >>> ds.device_of(array_api_strict.ones(2))
        Device('cpu:0', backend='apistrict')
    """

    spec = SPEC
    max_virtual_devices = 2  # array_api_strict has two devices besides its CPU
    virtual_limit_reason = " (array_api_strict has two test devices besides its CPU)"

    def _host_devices(self) -> list:
        return list(self.fw.__array_namespace_info__().devices()[:3])  # CPU_DEVICE, device1, device2

    def is_tensor(self, x) -> bool:
        namespace = getattr(x, "__array_namespace__", None)  # the array API's one test of an array
        return namespace is not None and not isinstance(x, type) and namespace() is self.fw

    def is_native_device(self, obj) -> bool:
        return isinstance(obj, type(self._host_devices()[0]))

    def accelerator_count(self) -> int:
        return 0  # array_api_strict computes on the host

    def make_native_device(self, kind: str, index: int):
        if kind == "cpu":
            return self._host_devices()[0]
        if kind == "gpu" and settings.virtual_device_count():
            return self._host_devices()[virtual.host_index(index)]
        raise DeviceUnavailableError(f"array_api_strict has no {kind}:{index}; use ds.cpu().")

    def describe(self, native) -> Device:
        index = self._host_devices().index(native)
        gpu = virtual.virtual_gpu_index(index, settings.virtual_device_count())
        if gpu is not None:
            return Device("gpu", gpu, native=native, backend=self.name, virtual=True)
        if index != virtual.HOST_CPU:
            raise DeviceUnavailableError(
                f"{native!r} backs no device here: it is a virtual GPU only under {settings.VIRTUAL_DEVICES_VAR}. "
                f"Copy the array to ds.cpu() first.")
        return Device("cpu", 0, native=native, backend=self.name)

    def tensor_device(self, x) -> Device:
        return self.describe(x.device)

    def copy_to(self, x, native, non_blocking: bool):
        return self.fw.asarray(x, device=native, copy=True)

    def tensor_to_numpy(self, x):
        import numpy

        host = self.fw.asarray(x, device=self._host_devices()[0], copy=True)
        return numpy.from_dlpack(host)  # the fresh host copy's memory, which nothing else holds

    def enable_virtual_devices(self, count: int) -> None:
        """Nothing to set up: array_api_strict's test devices always exist."""

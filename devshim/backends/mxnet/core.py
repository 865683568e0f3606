"""MXNet's device contract (1.9.x), for both the `mxnet.np` and the classic `mxnet.nd` arrays.

Native devices are `mx.Context` objects, so `mx.np.ones((2, 3), ctx=ds.try_gpu())`
and `mx.nd.ones((2, 3), ctx=ds.try_gpu())` work. `mx.np.ndarray` subclasses
`mx.nd.NDArray`, so one check owns both front-ends.

MXNet itself only checks the device *type* of an operation's inputs: adding
arrays on `cpu(0)` and `cpu(1)` runs silently. devshim compares type and
id, which is what makes virtual devices useful here: following
`devshim.backends.virtual`, under `DEVSHIM_VIRTUAL_DEVICES=N` virtual gpu
`i` is the host context `cpu(i + 1)`, and `cpu(0)` stays the CPU.
"""

from __future__ import annotations

from devshim import settings
from devshim.backends import virtual
from devshim.backends.base import Backend, DeviceTable
from devshim.backends.mxnet import SPEC, _internals
from devshim._device import Device
from devshim.errors import DeviceUnavailableError, InvalidDeviceError, UnsupportedValueError

# MXNet's host-memory context types besides plain "cpu": page-locked memory for
# fast GPU transfers, and shared memory for DataLoader workers. Both are the host.
_HOST_TYPES = ("cpu_pinned", "cpu_shared")


class MxnetBackend(Backend):
    """The MXNet adapter: devices are `mx.Context` objects.

    Example:
        >>> with ds.use_backend("mxnet"):
        ...     X = mx.np.ones((2, 3), ctx=ds.try_gpu())
    """

    spec = SPEC

    def __init__(self) -> None:
        super().__init__()
        self._described = DeviceTable("ctx")  # Context -> Device

    # ------------------------------------------------ framework primitives

    def is_tensor(self, x) -> bool:
        return isinstance(x, self.fw.nd.NDArray)

    def is_native_device(self, obj) -> bool:
        return isinstance(obj, self.fw.context.Context)

    def accelerator_count(self) -> int:
        mx = self.fw
        try:
            return mx.context.num_gpus()
        except mx.base.MXNetError:
            # A CUDA build of MXNet on a machine without a usable driver.
            return 0

    def make_native_device(self, kind: str, index: int):
        context = self.fw.context
        if kind == "meta":
            raise self._no_meta()
        if kind == "cpu":
            return context.cpu(index)
        if settings.virtual_device_count():
            return context.cpu(virtual.host_index(index))
        return context.gpu(index)

    def _describe(self, native) -> Device:
        kind, index = native.device_type, native.device_id
        if kind == "gpu":
            return Device("gpu", index, native=native, backend=self.name, platform="cuda")
        if kind == "cpu":
            gpu = virtual.virtual_gpu_index(index, settings.virtual_device_count())
            if gpu is not None:
                return Device("gpu", gpu, native=native, backend=self.name, virtual=True)
            return Device("cpu", index, native=native, backend=self.name)
        if kind in _HOST_TYPES:
            return Device("cpu", 0, native=native, backend=self.name, platform=kind)
        raise InvalidDeviceError(
            f"devshim does not handle the MXNet context {native!r}; it handles cpu, gpu, "
            f"cpu_pinned and cpu_shared. Copy the array to one of those first, e.g. "
            f"x.copyto(mx.cpu())."
        )

    def tensor_device(self, x) -> Device:
        return self.describe(x.ctx)  # `ctx`: both front-ends have it, neither warns

    # same_place: the base's "device_of(x) is the target" is MXNet's as_in_ctx, except
    # that it also counts cpu_pinned(0) arrays as already on the CPU, as same_device does.

    def copy_to(self, x, native, non_blocking: bool):
        # copyto(Context) always allocates, even on x's own context, and autograd
        # records it. MXNet's engine is asynchronous anyway: non_blocking changes nothing.
        shape = x.shape
        if (not shape or 0 in shape) and isinstance(x, self.fw.np.ndarray):
            # A 0-d or empty mx.np array: MXNet's shape inference reads () and 0 as "unknown"
            # unless NumPy shape semantics are on (mx.npx.set_np()), and the copy fails.
            with self.fw.util.np_shape(True):
                return x.copyto(native)
        return x.copyto(native)

    def tensor_to_numpy(self, x):
        # asnumpy allocates a fresh NumPy array and waits for x to be computed.
        return x.asnumpy()

    def data_address(self, x):
        """The address of `x`'s first element (MXNet's `MXNDArrayGetData`), or None where MXNet
        cannot say. Wait for `x` first (`x.wait_to_read()`): on an array still pending,
        MXNDArrayGetData allocates its storage on this thread while the engine may be allocating
        it for the write, which then lands in memory the array drops (MXNet's DLPack export waits
        too).

        Example:
            >>> ds.get_backend("mxnet").data_address(mx.np.ones(2)) > 0
            True
        """
        import ctypes

        get_data = _internals.NDARRAY_GET_DATA.get()
        if get_data is None:
            return None
        found, mx = ctypes.c_void_p(), self.fw
        try:
            mx.base.check_call(get_data(x.handle, ctypes.byref(found)))
        except (AttributeError, mx.base.MXNetError):
            return None
        return found.value

    def array_namespace(self, x):
        mx = self.fw
        if isinstance(x, mx.np.ndarray):
            return mx.np  # MXNet's NumPy-compatible front-end
        raise UnsupportedValueError(
            "This is a classic mx.nd.NDArray, whose functions are not NumPy's, so it has no "
            "array module. Use MXNet's NumPy front-end: ds.array_module(x.as_np_ndarray())."
        )

    # ------------------------------------------------------------ hooks

    def enable_virtual_devices(self, count: int) -> None:
        """Nothing to set up: every `cpu(i)` context exists as soon as it is named."""

    def has_cpu(self, index: int) -> bool:
        """MXNet accepts any `cpu(i)`; under virtual devices `cpu(1..N)` are the GPUs."""
        count = settings.virtual_device_count()
        gpu = virtual.virtual_gpu_index(index, count)
        if gpu is not None:
            raise DeviceUnavailableError(
                f"cpu:{index} is not a CPU here: with {settings.VIRTUAL_DEVICES_VAR}={count} "
                f"MXNet's cpu({index}) backs virtual gpu:{gpu}. Use ds.cpu() for the "
                f"CPU, or ds.gpu({gpu}) for that virtual GPU."
            )
        return True

    def check_platform(self, platform: str) -> None:
        if platform != "cuda":
            raise DeviceUnavailableError(
                f"{platform!r} was asked for, but MXNet's accelerators are CUDA GPUs only. "
                f"Write 'gpu' (or ds.try_gpu()) to mean whichever accelerator is present."
            )

    def synchronize(self, native) -> None:
        # MXNet queues all work on one engine; waitall is its only global barrier.
        self.fw.nd.waitall()

    def wait(self, x) -> None:
        x.wait_to_read()

    def device_details(self) -> list:
        mx = self.fw
        details: list = []
        for native in self.devices():
            described = self.describe(native)
            entry: dict = {"device": str(described), "name": str(native)}
            if described.virtual:
                entry.update(name=f"{native} (host memory)", virtual=True)
            elif described.kind == "cpu":
                entry.update(name=f"{native} (host CPU)")
            else:
                entry["platform"] = "cuda"
                try:
                    free, total = mx.context.gpu_memory_info(described.index)
                    entry.update(memory_bytes=total, free_bytes=free)
                except mx.base.MXNetError:
                    pass  # the count is known but the driver would not say more
            details.append(entry)
        return details

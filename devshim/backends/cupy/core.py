"""CuPy's device contract.

GPU devices are `cupy.cuda.Device` objects, which are also `with` blocks that
make a GPU current, the way CuPy code places new arrays::

    with ds.try_gpu(1):
        x = cupy.ones((2, 3))

CuPy has no CPU device: its host arrays are NumPy arrays. NumPy is CuPy's *host
partner* (`SPEC.host_partner`): the CPU is the string `"cpu"` (NumPy's
device), `to_device(cupy_array, "cpu")` returns a NumPy array, and the NumPy
backend hands `to_device(numpy_array, "gpu:1")` to this backend, which
returns a CuPy array on GPU 1.

Numba's CUDA device arrays (`numba.cuda.to_device`) are recognised through
`__cuda_array_interface__` once CuPy is imported (dispatch only asks
frameworks that are loaded): their device is read from their pointer, and
copies of them are CuPy arrays (or NumPy arrays on the CPU).

CuPy has no virtual devices: its arrays live in GPU memory, which the host
cannot stand in for.
"""

from __future__ import annotations

from devshim.backends.base import Backend
from devshim.backends.cupy import SPEC
from devshim._device import Device
from devshim.errors import UnsupportedValueError

HOST = "cpu"  # NumPy's device: CuPy's host arrays are NumPy arrays


class CupyBackend(Backend):
    """CuPy arrays (and Numba device arrays) on CUDA or ROCm GPUs; NumPy arrays on the host.

    Example:
        >>> with ds.use_backend("cupy"):
        ...     with ds.try_gpu():
        ...         x = cupy.ones((2, 3))
    """

    spec = SPEC

    def __init__(self) -> None:
        super().__init__()
        self._by_id: dict = {}  # GPU index -> Device
        self._host = Device("cpu", 0, native=HOST, backend=self.name)
        self._count = None
        self._missing = ""  # why CuPy sees no GPU, for devshim info

    # ------------------------------------------------------------ the GPUs

    def accelerator_count(self) -> int:
        if self._count is None:
            cupy = self.fw
            try:
                self._count = cupy.cuda.runtime.getDeviceCount()
            except cupy.cuda.runtime.CUDARuntimeError as err:  # no driver, or no device
                self._count, self._missing = 0, str(err)
        return self._count

    def find_platform(self):
        if not self.accelerator_count():
            return None
        return "rocm" if getattr(self.fw.cuda.runtime, "is_hip", False) else "cuda"

    # ------------------------------------------------------------ primitives

    def is_tensor(self, x) -> bool:
        return isinstance(x, self.fw.ndarray) or _is_numba_device_array(x)

    def is_native_device(self, obj) -> bool:
        return isinstance(obj, self.fw.cuda.Device)

    def make_native_device(self, kind: str, index: int):
        if kind == "meta":
            raise self._no_meta()
        if kind == "cpu":
            return HOST
        return self.fw.cuda.Device(index)

    def describe(self, native) -> Device:
        if type(native) is str:
            return self._host
        index = native.id
        described = self._by_id.get(index)
        if described is None:
            described = self._by_id[index] = Device(
                "gpu", index, native=native, backend=self.name, platform=self.accelerator_platform() or "cuda")
        return described

    def tensor_device(self, x) -> Device:
        if isinstance(x, self.fw.ndarray):
            return self.describe(x.device)
        return self.describe(self.fw.cuda.Device(self._pointer_device(x)))

    def _pointer_device(self, x) -> int:
        """The GPU a `__cuda_array_interface__` array's memory is on."""
        pointer = x.__cuda_array_interface__["data"][0]
        return self.fw.cuda.runtime.pointerGetAttributes(pointer).device

    def same_place(self, x, native) -> bool:
        if type(native) is str:
            return False  # CuPy arrays are never host arrays
        device = x.device if isinstance(x, self.fw.ndarray) else self.fw.cuda.Device(self._pointer_device(x))
        return device.id == native.id

    # ------------------------------------------------------------ copies

    def copy_to(self, x, native, non_blocking: bool):
        import numpy

        cupy = self.fw
        if type(native) is str:
            return self.tensor_to_numpy(x)  # the host partner's array
        if not isinstance(x, (cupy.ndarray, numpy.ndarray, numpy.generic)):
            with cupy.cuda.Device(self._pointer_device(x)):
                x = cupy.asarray(x)  # a CuPy view of the Numba array's memory, on its own GPU
        with native:
            # cupy.asarray copies a NumPy array, or a CuPy array of another GPU, to the current
            # GPU, and hands back a CuPy array already on it, which is then copied on that GPU.
            y = cupy.asarray(x)
            return x.copy() if y is x else y

    def tensor_to_numpy(self, x):
        if isinstance(x, self.fw.ndarray):
            return x.get()  # a new NumPy array; waits for x on its stream
        import numpy

        if isinstance(x, (numpy.ndarray, numpy.generic)):  # CuPy's host arrays are NumPy's (ds.cpu() makes them)
            return numpy.array(x, copy=True)
        return x.copy_to_host()  # Numba's

    def array_namespace(self, x):
        if isinstance(x, self.fw.ndarray):
            return self.fw
        raise UnsupportedValueError(
            "A Numba device array has no array module of its own. Wrap it, without copying: "
            "ds.array_module(cupy.asarray(x)) is cupy."
        )

    # ------------------------------------------------------------ waiting

    def synchronize(self, native) -> None:
        if type(native) is str or not self.accelerator_count():
            return
        devices = [native] if native is not None else [self.fw.cuda.Device(i) for i in range(self._count)]
        for device in devices:
            device.synchronize()

    def device_details(self) -> list:
        count = self.num_gpus()
        host = {"device": "cpu:0", "name": "host CPU (NumPy arrays)"}
        if not count:
            why = f": {self._missing}" if self._missing else ""
            host["name"] += f"; CuPy sees no GPU{why}"
            return [host]
        details: list = [host]
        runtime = self.fw.cuda.runtime
        for i in range(count):
            entry: dict = {"device": f"gpu:{i}", "name": f"cupy.cuda.Device({i})",
                           "platform": self.accelerator_platform()}
            try:
                props = runtime.getDeviceProperties(i)
                name = props.get("name", b"")
                entry["name"] = f"{name.decode() if isinstance(name, bytes) else name} (cupy.cuda.Device({i}))"
                entry["memory_bytes"] = props.get("totalGlobalMem")
            except runtime.CUDARuntimeError:
                pass  # the count is known but the driver would not say more
            details.append(entry)
        return details


def _is_numba_device_array(x) -> bool:
    return type(x).__module__.startswith("numba.") and hasattr(x, "__cuda_array_interface__")

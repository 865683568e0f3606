"""NumPy's device contract: one device, the host CPU.

The native device is the string ``"cpu"``, which NumPy 2's ``device=``
arguments accept (``np.ones(2, device=ds.cpu())``). NumPy cannot present
virtual devices: every array lives in the same host memory, so "distinct"
devices would be a fiction, and devshim refuses rather than fake them.
"""

from __future__ import annotations

from operator import methodcaller

from devshim.backends.base import Backend, DeviceTable
from devshim.backends.numpy import SPEC
from devshim._device import Device
from devshim.errors import DeviceUnavailableError

_CPU = Device("cpu", 0, native="cpu", backend="numpy")
_copy = methodcaller("copy")


class NumpyBackend(Backend):
    """NumPy arrays and scalars, on the host.

    Example:
        >>> ds.device_of(np.ones(2))
        Device('cpu:0', backend='numpy')
    """

    spec = SPEC

    def __init__(self) -> None:
        super().__init__()
        self._by_class = DeviceTable("__class__")  # every array type -> the host

    def device_table(self):
        return self._by_class

    def is_tensor(self, x) -> bool:
        np = self.fw
        return isinstance(x, (np.ndarray, np.generic))

    def is_native_device(self, obj) -> bool:
        return False  # "cpu" is a plain string, read by the spec parser

    def accelerator_count(self) -> int:
        return 0

    def make_native_device(self, kind: str, index: int):
        if kind == "meta":
            raise self._no_meta()
        if kind != "cpu" or index != 0:
            raise DeviceUnavailableError(
                f"NumPy arrays live on the host only; {kind}:{index} does not exist there. "
                f"Pick a GPU framework with DEVSHIM_BACKEND, or use ds.cpu()."
            )
        return "cpu"

    def describe(self, native) -> Device:
        return _CPU

    def tensor_device(self, x) -> Device:
        self._by_class[type(x)] = _CPU
        return _CPU

    def same_place(self, x, native) -> bool:
        return True  # the target was checked to be the host, and every array is there

    def copy_to(self, x, native, non_blocking: bool):
        return x.copy()

    def copier(self, native, non_blocking: bool):
        return _copy  # x.copy(), with no Python frame of devshim's per leaf

    def tensor_to_numpy(self, x):
        return self.fw.array(x, copy=True)

    def array_namespace(self, x):
        return self.fw  # numpy itself, as in Chainer (NumPy 2 is an array-API namespace too)

    def device_details(self) -> list:
        return [{"device": "cpu:0", "name": "host CPU"}]

    # The fast paths skip what cannot differ for NumPy: where an array lives.

    def move_fn(self):
        targets, resolve = self._targets, self.target

        def copy_if_needed(x, device):
            try:
                targets[device]
                return x
            except (KeyError, TypeError):
                pass
            resolve(device)  # still checks that the device exists
            return x

        return copy_if_needed

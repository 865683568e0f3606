"""NumPy adapter: one device, the host CPU.

The native device is the string ``"cpu"``, which NumPy 2's ``device=``
arguments accept (``np.ones(2, device=ds.cpu())``). NumPy cannot present
virtual devices: every array lives in the same host memory, so "distinct"
devices would be a fiction, and devshim refuses rather than fake them.
"""

from __future__ import annotations

from typing import Any

from devshim.backends.base import Backend
from devshim.device import Device
from devshim.errors import DeviceUnavailableError

_CPU = Device("cpu", 0, native="cpu", backend="numpy")


class NumpyBackend(Backend):
    name = "numpy"
    module = "numpy"
    pip_extra = "numpy"

    def is_tensor(self, x: Any) -> bool:
        np = self.fw
        return isinstance(x, (np.ndarray, np.generic))

    def is_native_device(self, obj: Any) -> bool:
        return False  # "cpu" is a plain string, read by the spec parser

    def accelerator_count(self) -> int:
        return 0

    def make_native_device(self, kind: str, index: int) -> Any:
        if kind != "cpu" or index != 0:
            raise DeviceUnavailableError(
                f"NumPy arrays live on the host only; {kind}:{index} does not exist there. "
                f"Pick a GPU framework with DEVSHIM_BACKEND, or use ds.cpu()."
            )
        return "cpu"

    def describe(self, native: Any) -> Device:
        return _CPU

    def tensor_device(self, x: Any) -> Device:
        return _CPU

    def copy_to(self, x: Any, native: Any, non_blocking: bool) -> Any:
        return x.copy()

    def move_if_needed(self, x: Any, native: Any) -> Any:
        return x

    def tensor_to_numpy(self, x: Any) -> Any:
        return self.fw.array(x, copy=True)

    def device_details(self):
        return [{"device": "cpu:0", "name": "host CPU"}]

"""PyTorch adapter.

"gpu" is torch's accelerator: CUDA (and ROCm, which torch also exposes as
``torch.cuda``) when available, else Apple's MPS. Native devices are
``torch.device`` objects, so ``torch.ones(2, device=ds.try_gpu())`` works.
PyTorch has a single CPU device and cannot present virtual accelerators.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from devshim.backends.base import Backend
from devshim.device import Device
from devshim.errors import DeviceUnavailableError, DevshimError, InvalidDeviceError

# torch dtypes NumPy lacks, and the ml_dtypes type (same bits) that stands in for each.
_ML_DTYPES = {
    "bfloat16": ("int16", "bfloat16"),
    "float8_e4m3fn": ("uint8", "float8_e4m3fn"),
    "float8_e5m2": ("uint8", "float8_e5m2"),
    "float8_e4m3fnuz": ("uint8", "float8_e4m3fnuz"),
    "float8_e5m2fnuz": ("uint8", "float8_e5m2fnuz"),
}


class TorchBackend(Backend):
    name = "torch"
    module = "torch"
    pip_extra = "torch"

    def __init__(self) -> None:
        self._described: Dict[Any, Device] = {}

    def is_tensor(self, x: Any) -> bool:
        return isinstance(x, self.fw.Tensor)

    def is_native_device(self, obj: Any) -> bool:
        return isinstance(obj, self.fw.device)

    def platform(self) -> Optional[str]:
        """"cuda" or "mps": the accelerator this torch build can use, if any."""
        torch = self.fw
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return "mps"
        return None

    def accelerator_count(self) -> int:
        platform = self.platform()
        if platform == "cuda":
            return self.fw.cuda.device_count()
        return 1 if platform == "mps" else 0

    def make_native_device(self, kind: str, index: int) -> Any:
        torch = self.fw
        if kind == "cpu":
            return torch.device("cpu")
        return torch.device(self.platform() or "cuda", index)

    def check_platform(self, platform: str) -> None:
        actual = self.platform()
        if actual is not None and platform != actual and self.num_gpus() > 0:
            raise DeviceUnavailableError(
                f"{platform!r} was asked for, but this torch build's accelerator is {actual!r}. "
                f"Write 'gpu' (or ds.try_gpu()) to mean whichever accelerator is present."
            )

    def describe(self, native: Any) -> Device:
        described = self._described.get(native)
        if described is None:
            described = self._describe(native)
            self._described[native] = described
        return described

    def _describe(self, native: Any) -> Device:
        if native.type == "cpu":
            return Device("cpu", 0, native=native, backend=self.name)
        if native.type in ("cuda", "mps"):
            index = native.index
            if index is None:
                index = self.fw.cuda.current_device() if native.type == "cuda" and self.platform() == "cuda" else 0
            return Device("gpu", index, native=native, backend=self.name, platform=native.type)
        raise InvalidDeviceError(
            f"devshim does not handle torch device type {native.type!r}; it handles cpu, cuda "
            f"and mps. Move the tensor to one of those first."
        )

    def tensor_device(self, x: Any) -> Device:
        return self.describe(x.device)

    def copy_to(self, x: Any, native: Any, non_blocking: bool) -> Any:
        # copy=True guarantees new storage even when x is already on `native`;
        # Tensor.to is differentiable, so autograd sees the copy.
        return x.to(native, non_blocking=non_blocking, copy=True)

    def move_if_needed(self, x: Any, native: Any) -> Any:
        if self.tensor_device(x) == self.describe(native):
            return x
        return x.to(native)

    def tensor_to_numpy(self, x: Any) -> Any:
        t = x.detach()
        t = t.cpu() if t.device.type != "cpu" else t.clone()
        t = t.resolve_conj().resolve_neg()
        name = str(t.dtype).replace("torch.", "")
        if name not in _ML_DTYPES:
            return t.numpy()
        bits, stand_in = _ML_DTYPES[name]
        try:
            import ml_dtypes
        except ImportError:
            raise DevshimError(
                f"NumPy has no {name} type. Install ml_dtypes (pip install \"devshim[torch]\") "
                f"to get an exact copy, or convert first, e.g. to_numpy(x.float())."
            ) from None
        return t.view(getattr(self.fw, bits)).numpy().view(getattr(ml_dtypes, stand_in))

    def synchronize(self, native: Optional[Any]) -> None:
        # Cheap checks first: timing code calls this around every measurement.
        kind = getattr(native, "type", None)
        if kind == "cpu":
            return
        torch = self.fw
        if kind is None:
            kind = "cuda" if torch.cuda.is_initialized() else self.platform()
        if kind == "cuda":
            # No CUDA context yet means nothing was ever queued on a CUDA device.
            if not torch.cuda.is_initialized():
                return
            if native is None:
                for i in range(torch.cuda.device_count()):
                    torch.cuda.synchronize(i)
            else:
                torch.cuda.synchronize(native)
        elif kind == "mps":
            torch.mps.synchronize()  # MPS has one device and one queue

    def device_details(self) -> List[Dict[str, Any]]:
        details: List[Dict[str, Any]] = [{"device": "cpu:0", "name": "host CPU"}]
        torch = self.fw
        for native in self.devices()[1:]:
            entry: Dict[str, Any] = {"device": str(self.describe(native)), "name": str(native)}
            if native.type == "cuda":
                props = torch.cuda.get_device_properties(native.index)
                entry.update(name=props.name, memory_bytes=props.total_memory)
            elif native.type == "mps":
                entry.update(name="Apple MPS")
            details.append(entry)
        return details

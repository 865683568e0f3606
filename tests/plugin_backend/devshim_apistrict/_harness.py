"""apistrict's harness for devshim's conformance suite (found through the `devshim.harnesses` entry
point): array_api_strict's arrays made and read with its own calls, and NumPy's only through DLPack
on host copies."""

from __future__ import annotations

import array_api_strict as xp
import numpy as np

from devshim_conformance import Harness

_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float32", "float64", "complex64", "complex128")


def _host(x):
    """A NumPy view of a fresh host copy of `x`."""
    return np.from_dlpack(xp.asarray(x, device=xp.__array_namespace_info__().default_device(), copy=True))


class ApiStrictHarness(Harness):
    name = "apistrict"
    dtypes = _DTYPES
    has_autograd = False
    runs_mixed_ops = False  # array_api_strict refuses arrays of two devices in one op itself
    guard_sees_ops = False
    namespace_device_keyword = "device"
    first_tensor_code = "import array_api_strict as xp; x = xp.ones(4)"

    def array_module(self):
        return xp

    def placements(self, device):
        return [("xp.zeros(2, device=d)", lambda: xp.zeros(2, device=device)),
                ("xp.asarray([1.0], device=d)", lambda: xp.asarray([1.0], device=device))]

    def tensor(self, values, device=None, dtype=None):
        # Made on the CPU, then copied: a test device's default dtypes are not the CPU's.
        x = xp.asarray(values, dtype=getattr(xp, dtype) if dtype else None)
        return x if device is None else xp.asarray(x, device=device, copy=True)

    def from_bits(self, raw, shape, dtype, device=None):
        host = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
        return xp.asarray(xp.from_dlpack(host), device=device, copy=True)

    def bits(self, x):
        return np.ascontiguousarray(_host(x)).tobytes()

    def values(self, x):
        return np.array(_host(x))

    def dtype_name(self, x):
        return next(name for name in _DTYPES if x.dtype == getattr(xp, name))

    def fill(self, x, value):
        x[...] = value

    def aliases(self, a, b):
        return np.shares_memory(np.from_dlpack(a), np.from_dlpack(b))

    def cast(self, x, dtype):
        return xp.astype(x, getattr(xp, dtype))


HARNESS = ApiStrictHarness()

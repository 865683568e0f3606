from __future__ import annotations


import numpy as np

from devshim_conformance import Harness


class NumpyHarness(Harness):
    name = "numpy"
    first_tensor_code = "import numpy; x = numpy.ones(4)"

    def array_module(self):
        return np

    dtypes = (
        "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
        "float16", "float32", "float64", "complex64", "complex128",
    )
    has_autograd = False
    _numpy2 = int(np.__version__.split(".")[0]) >= 2
    namespace_device_keyword = "device" if _numpy2 else None  # NumPy 1 takes no device

    def placements(self, device):
        if not self._numpy2:
            return []
        return [("np.zeros(2, device=d)", lambda: np.zeros(2, device=device)),
                ("np.asarray([1.0], device=d)", lambda: np.asarray([1.0], device=device))]

    def tensor(self, values, device=None, dtype=None):
        return np.array(values, dtype=dtype)

    def from_bits(self, raw, shape, dtype, device=None):
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()

    def bits(self, x):
        return np.ascontiguousarray(x).tobytes()

    def values(self, x):
        return np.array(x)

    def dtype_name(self, x):
        return np.asarray(x).dtype.name

    def fill(self, x, value):
        x[...] = value

    def aliases(self, a, b):
        return np.shares_memory(a, b)

    def cast(self, x, dtype):
        return x.astype(dtype)

    def out_of_memory(self):
        try:
            np.empty(2**62, dtype=np.uint8)  # 4 EiB: MemoryError at once
        except MemoryError as error:
            return error
        raise AssertionError("NumPy allocated 4 EiB")

    def on_host(self, array):
        return array

    def address(self, x):
        return x.__array_interface__["data"][0]


HARNESS = NumpyHarness()

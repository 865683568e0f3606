"""MXNet harness: builds ``mxnet.np`` arrays, the front-end the D2L chapter uses.

``npx.set_np()`` is needed for 0-d and 0-size shapes (the legacy nd API reads a
0 in a shape as "unknown"). It only affects the thread that calls it, which is
the one pytest runs the tests in.
"""

from __future__ import annotations

import ctypes

import mxnet as mx
import numpy as np
from mxnet import autograd, npx

from harnesses import Harness

npx.set_np()


def data_span(x) -> tuple:
    """(first byte address, byte count) of ``x``'s values, read from MXNet itself."""
    address = ctypes.c_void_p()
    mx.base.check_call(mx.base._LIB.MXNDArrayGetData(x.handle, ctypes.byref(address)))
    return address.value or 0, x.size * np.dtype(x.dtype).itemsize


class MxnetHarness(Harness):
    name = "mxnet"
    # What mxnet.np arrays can hold in 1.9.1: no int16, unsigned > 8 bits, complex or bfloat16.
    dtypes = ("bool", "uint8", "int8", "int32", "int64", "float16", "float32", "float64")

    def real_gpu(self, index):
        return mx.gpu(index)

    def tensor(self, values, device=None, dtype=None):
        return mx.np.array(np.asarray(values, dtype=dtype or np.float32), ctx=device)

    def from_bits(self, raw, shape, dtype, device=None):
        host = np.frombuffer(raw, dtype=dtype).copy()
        # Made flat, then reshaped: filling a 0-d array goes through a scalar
        # conversion that may not keep a NaN's payload.
        return mx.np.array(host, dtype=dtype, ctx=device).reshape(shape)

    def bits(self, x):
        return x.asnumpy().tobytes()

    def values(self, x):
        return x.asnumpy()

    def dtype_name(self, x):
        return np.dtype(x.dtype).name

    def fill(self, x, value):
        x[...] = value

    def aliases(self, a, b):
        (start_a, size_a), (start_b, size_b) = data_span(a), data_span(b)
        if size_a == 0 or size_b == 0:
            return False
        return start_a < start_b + size_b and start_b < start_a + size_a

    def grad_of_sum(self, fn, values, device=None):
        x = mx.np.array(np.asarray(values, dtype=np.float64), dtype="float64", ctx=device)
        x.attach_grad()
        with autograd.record():
            y = fn(x).sum()
        y.backward()
        return x.grad.asnumpy()


HARNESS = MxnetHarness()

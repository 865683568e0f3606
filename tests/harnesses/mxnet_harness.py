"""MXNet harness: builds ``mxnet.np`` arrays, the front-end the D2L chapter uses.

``npx.set_np()`` is needed for 0-d and 0-size shapes (the legacy nd API reads a
0 in a shape as "unknown"). It only affects the thread that calls it, which is
the one pytest runs the tests in.
"""

from __future__ import annotations

import ctypes

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, npx

from devshim_conformance import Harness

npx.set_np()


def data_span(x) -> tuple:
    """(first byte address, byte count) of ``x``'s values, read from MXNet itself."""
    address = ctypes.c_void_p()
    x.wait_to_read()  # reading the address of a pending array races with the engine's write
    mx.base.check_call(mx.base._LIB.MXNDArrayGetData(x.handle, ctypes.byref(address)))
    return address.value or 0, x.size * np.dtype(x.dtype).itemsize


class MxnetHarness(Harness):
    name = "mxnet"
    first_tensor_code = "import mxnet as mx; x = mx.np.ones(4)"

    def array_module(self):
        return mx.np

    def gpu_count(self):
        return mx.context.num_gpus()

    namespace_device_keyword = "ctx"  # mxnet.np in 1.9 (MXNet 2 renamed it device=)

    def placements(self, device):
        return [("mx.np.zeros(2, ctx=d)", lambda: mx.np.zeros(2, ctx=device)),
                ("mx.np.ones(2).as_in_ctx(d)", lambda: mx.np.ones(2).as_in_ctx(device)),
                ("mx.np.ones(2).copyto(d)", lambda: mx.np.ones(2).copyto(device))]
    # What mxnet.np arrays can hold in 1.9.1: no int16, unsigned > 8 bits, complex or bfloat16.
    dtypes = ("bool", "uint8", "int8", "int32", "int64", "float16", "float32", "float64")

    def real_gpu(self, index):
        return mx.gpu(index)

    def mlp(self, sizes=(4, 8, 3), seed=0):
        rng = np.random.default_rng(seed)
        net = gluon.nn.Sequential()
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            net.add(gluon.nn.Dense(b, in_units=a, activation="relu" if i < len(sizes) - 2 else None))
        net.initialize(ctx=mx.cpu())
        for _, p in net.collect_params().items():
            p.set_data(mx.np.array(rng.standard_normal(p.shape).astype(np.float32)))
        return net

    def grads(self, model, x, y):
        with autograd.record():
            loss = ((model(x) - y) ** 2).sum()
        loss.backward()
        return [p.grad(p.list_ctx()[0]) for p in model.collect_params().values()]

    def param_values(self, model):
        return [p.data(p.list_ctx()[0]).asnumpy() for p in model.collect_params().values()]

    def sgd_step(self, model, grads, lr):
        for p, g in zip(model.collect_params().values(), grads):
            p.set_data(p.data(p.list_ctx()[0]) - lr * g)

    def host_reads(self):
        return [("float(a)", float), ("int(a)", int), ("bool(a)", bool), ("a.item()", lambda a: a.item()),
                ("a.tolist()", lambda a: a.tolist()), ("a.asnumpy()", lambda a: a.asnumpy()),
                ("print(a) / repr(a)", repr)]

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
        x.wait_to_read()  # MXNet writes asynchronously: a NumPy view of the same memory sees it only once done

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

    def custom_gradient(self, forward, backward):
        class Function(autograd.Function):
            def forward(self, *inputs):
                self.save_for_backward(*inputs)
                return forward(*inputs)

            def backward(self, grad):  # MXNet 1.9 passes and takes classic NDArrays here
                return tuple(g.as_nd_ndarray() for g in backward(*self.saved_tensors, grad.as_np_ndarray()))

        return lambda *inputs: Function()(*inputs)

    custom_second_order = False
    wrong_gradient_count = r"Check failed"
    runs_backward_of_empty = False

    def identity(self, count):
        class Identity(autograd.Function):
            def forward(self, *inputs):
                outputs = tuple(x.copy() for x in inputs)
                return outputs if count > 1 else outputs[0]

            def backward(self, *grads):
                return grads if count > 1 else grads[0]

        return lambda *inputs: Identity()(*inputs)

    def stop_gradient(self, x):
        return x.detach()

    def cast(self, x, dtype):
        return x.astype(dtype)

    def gather_rows(self, weight, rows):
        table = weight.as_nd_ndarray()
        indices = mx.nd.array(list(rows), ctx=weight.context)
        return mx.nd.Embedding(indices, table, table.shape[0], table.shape[1], sparse_grad=True)

    def special_kind(self, x):
        return x.as_nd_ndarray().copy()

    def out_of_memory(self):
        # MXNet refuses a huge array by its element count, not its memory: the error its GPU
        # allocator raises when cudaMalloc fails, built as MXNet builds it.
        return mx.base.MXNetError("cudaMalloc retry failed: out of memory")

    def on_host(self, array):
        if array.dtype.name not in self.dtypes:
            return None
        return mx.np.array(array, dtype=array.dtype, ctx=mx.cpu())

    def address(self, x):
        return data_span(x)[0]


HARNESS = MxnetHarness()

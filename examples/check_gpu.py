"""Is my GPU being used? Theano's check1.py / check2.py ("Using the GPU"), with devshim.

Theano's test computes exp() of a vector of random numbers 1000 times, prints how long it took
and whether the GPU or the CPU did the work. Its second version returns a handle on the device
instead of copying every result back to the host, and is faster for it. Here both run on
``ds.try_gpu()`` with whichever framework devshim selected; ``ds.device_of`` says where the
result is, and ``ds.Timer`` waits for the device before reading the clock, so the times include
the work and not only its launch.

    python examples/check_gpu.py
    DEVSHIM_BACKEND=tensorflow python examples/check_gpu.py
    DEVSHIM_DEVICE=cpu python examples/check_gpu.py      # the CPU run, for comparison
    python examples/check_gpu.py --iters 100             # fewer calls
"""

import argparse
import contextlib

import numpy as np

import devshim as ds

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--iters", type=int, default=1000, help="calls of exp() to time (default 1000)")
ITERS = parser.parse_args().iters
VLEN = 10 * 30 * 768  # 10 x #cores x #threads per core, as in Theano's test

backend = ds.get_backend().name
device = ds.try_gpu()
rng = np.random.RandomState(22)
x = rng.rand(VLEN).astype(np.float32)  # a NumPy array, on the host

# Store x on the device once (Theano's `shared`): with the framework's own call.
if backend == "torch":
    import torch

    x = torch.from_numpy(x).to(device)
elif backend == "tensorflow":
    import tensorflow as tf

    with device:
        x = tf.identity(tf.constant(x))
elif backend == "jax":
    import jax

    x = jax.device_put(x, device)
elif backend == "mxnet":
    import mxnet as mx

    mx.npx.set_np()  # NumPy semantics (0-d results), as D2L runs MXNet

    x = mx.np.array(x, ctx=device)
elif backend == "cupy":
    import cupy

    with device:
        x = cupy.asarray(x)

xp = ds.array_module(x)  # numpy, torch's, jax.numpy, tf.experimental.numpy, mxnet.numpy, cupy
# TensorFlow and CuPy run an op under the device scope in force, the others where x is.
scope = ds.neutral_device(x).native if backend in ("tensorflow", "cupy") else contextlib.nullcontext()


def f():
    """Theano's f = function([], T.exp(x)): the result comes back to the host as a NumPy array."""
    with scope:
        return ds.to_numpy(xp.exp(x))


def f_on_device():
    """check2.py: return a handle on the device, no copy back."""
    with scope:
        return xp.exp(x)


f(), f_on_device()  # warm up (first calls allocate, compile, load kernels)

timer = ds.Timer(device)  # waits for the device at start and stop
for _ in range(ITERS):
    r = f()
copied = timer.stop()

timer.start()
for _ in range(ITERS):
    r_device = f_on_device()
kept = timer.stop()

where = ds.neutral_device(r_device)
kind = "a virtual GPU, which computes on the CPU" if where.virtual else "the GPU" if where.kind == "gpu" else "the CPU"
print(f"{backend}: exp() of {VLEN} float32 numbers, {ITERS} times, on {where}")
print(f"{backend}: returning a NumPy array each time (copied to the host): {copied:.3f} s")
print(f"{backend}: returning a handle on the device (no copy back):        {kept:.3f} s "
      f"({copied / kept:.2f}x as fast)")
print(f"{backend}: result is {np.array2string(r, precision=5, threshold=6, edgeitems=3)}")
np.testing.assert_allclose(ds.to_numpy(r_device), r, rtol=1e-6)  # one explicit copy, at the end
print(f"{backend}: used {kind} (device_of(result) is {where})")

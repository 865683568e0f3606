from __future__ import annotations

import jax
import numpy as np

import devshim as ds
from harnesses import Harness

# Under DEVSHIM_VIRTUAL_DEVICES the host devices must be configured before JAX
# initialises, and harness.tensor() may be the first thing to make an array.
ds.num_gpus(backend="jax")
# 64-bit types exist in JAX only with x64 on; the suite covers every dtype.
jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402  (a JAX dependency: NumPy's stand-in for bfloat16)


class JaxHarness(Harness):
    name = "jax"
    dtypes = (
        "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
        "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
    )
    mutable = False  # JAX arrays are immutable

    def _np_dtype(self, name):
        return ml_dtypes.bfloat16 if name == "bfloat16" else (np.dtype(name) if name else None)

    def tensor(self, values, device=None, dtype=None):
        x = jnp.array(values, dtype=self._np_dtype(dtype))
        return x if device is None else jax.device_put(x, device)  # the JAX idiom

    def from_bits(self, raw, shape, dtype, device=None):
        host = np.frombuffer(raw, dtype=self._np_dtype(dtype)).reshape(shape)
        return jax.device_put(host, device) if device is not None else jnp.asarray(host)

    def bits(self, x):
        return np.ascontiguousarray(jax.device_get(x)).tobytes()

    def values(self, x):
        host = np.array(jax.device_get(x))
        if host.dtype == ml_dtypes.bfloat16:
            host = host.astype(np.float32)
        return host

    def dtype_name(self, x):
        return x.dtype.name

    def fill(self, x, value):
        raise NotImplementedError("JAX arrays are immutable")

    def aliases(self, a, b):
        # JAX has no views; two arrays share memory only when their buffers overlap.
        if a.size == 0 or b.size == 0:
            return False
        start_a, start_b = a.unsafe_buffer_pointer(), b.unsafe_buffer_pointer()
        return start_a < start_b + b.nbytes and start_b < start_a + a.nbytes

    def grad_of_sum(self, fn, values, device=None):
        x = jnp.array(values, dtype=jnp.float64)
        if device is not None:
            x = jax.device_put(x, device)
        return np.asarray(jax.grad(lambda t: jnp.sum(fn(t)))(x))


HARNESS = JaxHarness()

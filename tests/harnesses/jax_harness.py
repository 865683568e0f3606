from __future__ import annotations

import jax
import numpy as np

import devshim as ds
from devshim_conformance import Harness

# Under DEVSHIM_VIRTUAL_DEVICES the host devices must be configured before JAX
# initialises, and harness.tensor() may be the first thing to make an array.
ds.num_gpus(backend="jax")
# 64-bit types exist in JAX only with x64 on; the suite covers every dtype.
jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402  (a JAX dependency: NumPy's stand-in for bfloat16)


def on_the_host():
    """Arrays made with no device go to the host CPU, uncommitted, as the suite expects of
    ``tensor(values)``: JAX's own default device is GPU 0 on a GPU machine, and virtual gpu:0
    with virtual GPUs (devshim makes it so, as on a GPU machine)."""
    return jax.default_device(ds.cpu(backend="jax"))


class JaxHarness(Harness):
    name = "jax"
    first_tensor_code = "import jax.numpy as jnp; x = jnp.ones(4)"
    starts_devices_code = "import jax\njax.devices()\n"

    def array_module(self):
        return jnp

    def gpu_count(self):
        return sum(d.platform != "cpu" for d in jax.devices())

    def placements(self, device):
        return [("jax.device_put(np.ones(2), d)", lambda: jax.device_put(np.ones(2, np.float32), device)),
                ("jnp.zeros(2, device=d)", lambda: jnp.zeros(2, device=device)),
                ("jnp.asarray([1.0], device=d)", lambda: jnp.asarray([1.0], device=device)),
                ("jnp.ones_like(jnp.ones(2), device=d)", lambda: jnp.ones_like(jnp.ones(2), device=device))]
    dtypes = (
        "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
        "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
    )
    mutable = False  # JAX arrays are immutable
    runs_mixed_ops = False  # JAX refuses ops on arrays committed to different devices itself
    guard_sees_ops = False  # ...and devshim leaves that refusal to JAX

    def host_reads(self):
        return [("float(x)", float), ("int(x)", int), ("bool(x)", bool), ("x.item()", lambda x: x.item()),
                ("x.tolist()", lambda x: x.tolist()),
                ("print(x) / repr(x)", repr), ("formatting x (f-string, str.format)", lambda x: f"{x}"),
                ("np.asarray(x)", lambda x: np.asarray(x)), ("np.add(x, ...)", lambda x: np.add(x, 1))]

    def _np_dtype(self, name):
        return ml_dtypes.bfloat16 if name == "bfloat16" else (np.dtype(name) if name else None)

    def tensor(self, values, device=None, dtype=None):
        with on_the_host():
            x = jnp.array(values, dtype=self._np_dtype(dtype))
        return x if device is None else jax.device_put(x, device)  # the JAX idiom

    def from_bits(self, raw, shape, dtype, device=None):
        host = np.frombuffer(raw, dtype=self._np_dtype(dtype)).reshape(shape)
        if device is not None:
            return jax.device_put(host, device)
        with on_the_host():
            return jnp.asarray(host)

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

    # ---- models: a list of (weight, bias) pairs, the way Flax and Haiku keep parameters

    def mlp(self, sizes=(4, 8, 3), seed=0):
        rng = np.random.default_rng(seed)
        with on_the_host():
            return [(jnp.array(rng.standard_normal((a, b)).astype(np.float32)),
                     jnp.array(rng.standard_normal(b).astype(np.float32)))
                    for a, b in zip(sizes[:-1], sizes[1:])]

    def forward(self, model, x):
        for i, (w, b) in enumerate(model):
            x = x @ w + b
            if i < len(model) - 1:
                x = jax.nn.relu(x)
        return x

    def grads(self, model, x, y):
        loss = lambda params: jnp.sum((self.forward(params, x) - y) ** 2)  # noqa: E731
        grads = jax.grad(loss)(model)
        return [g for pair in grads for g in pair]

    def param_values(self, model):
        return [np.array(jax.device_get(p)) for pair in model for p in pair]

    def sgd_step(self, model, grads, lr):
        flat = iter(grads)
        return [(w - lr * next(flat), b - lr * next(flat)) for w, b in model]  # a new pytree

    def grad_of_sum(self, fn, values, device=None):
        x = jnp.array(values, dtype=jnp.float64)
        if device is not None:
            x = jax.device_put(x, device)
        return np.asarray(jax.grad(lambda t: jnp.sum(fn(t)))(x))

    def custom_gradient(self, forward, backward):
        function = jax.custom_vjp(forward)
        function.defvjp(lambda *inputs: (forward(*inputs), inputs),
                        lambda inputs, grad: tuple(backward(*inputs, grad)))
        return function

    wrong_gradient_count = r"Custom VJP bwd rule must produce an output with the same container"

    def identity(self, count):
        @jax.custom_vjp
        def identity(*inputs):
            return inputs if count > 1 else inputs[0]

        identity.defvjp(lambda *inputs: (identity(*inputs), None),
                        lambda _, grads: tuple(grads) if count > 1 else (grads,))
        return identity

    def in_place_kind(self, x):
        return None  # JAX arrays are immutable

    def stop_gradient(self, x):
        return jax.lax.stop_gradient(x)

    def cast(self, x, dtype):
        return x.astype(dtype)

    def gather_rows(self, weight, rows):
        return jnp.take(weight, jnp.asarray(list(rows)), axis=0)

    def out_of_memory(self):
        try:
            with on_the_host():
                # 2**60 bytes, past any address space: refused at once wherever the kernel
                # overcommits (4 TB was granted on a GPU machine, and filling it killed the process)
                jnp.ones((2**30, 2**28))
        except RuntimeError as error:
            return error
        raise AssertionError("JAX allocated 2**60 bytes")

    def on_host(self, array):
        return jax.device_put(array, ds.cpu(backend="jax"))

    def address(self, x):
        return x.unsafe_buffer_pointer()


HARNESS = JaxHarness()

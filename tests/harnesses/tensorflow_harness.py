from __future__ import annotations

import numpy as np
import tensorflow as tf

import devshim as ds
from devshim_conformance import Harness

# Under DEVSHIM_VIRTUAL_DEVICES the logical CPUs must be configured before the
# first tensor exists, and harness.tensor() may be the first thing to make one.
ds.num_gpus(backend="tensorflow")


class TensorflowHarness(Harness):
    name = "tensorflow"
    first_tensor_code = "import tensorflow as tf; x = tf.ones(4)"
    starts_devices_code = "import tensorflow as tf\ntf.constant(1.0)\n"

    def array_module(self):
        return tf.experimental.numpy

    def gpu_count(self):
        return len(tf.config.list_physical_devices("GPU"))

    namespace_device_keyword = None  # tf.experimental.numpy places by device scope

    def placements(self, device):
        def under_scope(make):
            def run():
                with tf.device(device):
                    return make()
            return run

        return [("with tf.device(d): tf.ones(2)", under_scope(lambda: tf.ones(2))),
                ("with tf.device(d): tf.identity(t)", under_scope(lambda: tf.identity(np.ones(2, np.float32)))),
                ("with tf.device(d): tf.Variable(...)", under_scope(lambda: tf.Variable([1.0, 2.0])))]
    dtypes = (
        "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
        "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
    )
    mutable = False

    def run_on(self, device, fn):
        with device:
            return fn()

    def mlp(self, sizes=(4, 8, 3), seed=0):
        import keras

        rng = np.random.default_rng(seed)
        layers = [keras.Input((sizes[0],))]
        for i, b in enumerate(sizes[1:]):
            layers.append(keras.layers.Dense(b, activation="relu" if i < len(sizes) - 2 else None))
        model = keras.Sequential(layers)
        model.set_weights([rng.standard_normal(w.shape).astype(np.float32) for w in model.get_weights()])
        return model

    def forward(self, model, x):
        with ds.model_device(model):  # run where the weights are (a TensorFlow device is a scope)
            return model(x)

    def grads(self, model, x, y):
        with ds.model_device(model):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum((model(x) - y) ** 2)
            return tape.gradient(loss, [w.value for w in model.trainable_weights])

    def param_values(self, model):
        return [np.array(w) for w in model.get_weights()]

    def sgd_step(self, model, grads, lr):
        for w, g in zip(model.trainable_weights, grads):
            with tf.device(w.value.device):
                w.assign_sub(lr * g)

    def host_reads(self):
        # np.asarray(t) and memoryview(t) read through the buffer protocol, in C: not seen.
        return [("float(t)", float), ("int(t)", int), ("bool(t)", bool), ("t.numpy()", lambda t: t.numpy()),
                ("print(t) / repr(t)", repr), ("formatting t (f-string, str.format)", lambda t: f"{t}")]

    def real_gpu(self, index):
        from devshim.backends.tensorflow.core import TFDevice

        return TFDevice(f"/GPU:{index}")

    def tensor(self, values, device=None, dtype=None):
        if device is None:
            return tf.constant(values, dtype=dtype)
        with device:  # the TensorFlow idiom the issue asks devices to support
            return tf.constant(values, dtype=dtype)

    def from_bits(self, raw, shape, dtype, device=None):
        target = tf.as_dtype(dtype)
        as_bytes = tf.constant(np.frombuffer(raw, dtype=np.uint8))
        if target == tf.bool:  # tf.bitcast has no bool; the raw bytes are 0 or 1
            flat = tf.cast(as_bytes, tf.bool)
        elif target.size == 1:
            flat = tf.bitcast(as_bytes, target)
        else:
            flat = tf.bitcast(tf.reshape(as_bytes, (-1, target.size)), target)
        x = tf.reshape(flat, shape)
        if device is None:
            return x
        with tf.device(str(device)):
            return tf.identity(x)

    def bits(self, x):
        return np.ascontiguousarray(x.numpy()).tobytes()

    def values(self, x):
        host = np.array(x.numpy())
        if x.dtype == tf.bfloat16:
            host = host.astype(np.float32)
        return host

    def dtype_name(self, x):
        return x.dtype.name

    def fill(self, x, value):
        raise NotImplementedError("TensorFlow tensors are immutable")

    def aliases(self, a, b):
        # TensorFlow has no views: sharing only happens when an op forwards its input
        # buffer (tf.identity, tf.reshape, copies between two CPU devices). numpy() always
        # copies, but DLPack exports the buffer itself, so host-memory buffers (CPU and
        # virtual devices) can be compared. Device memory (a real GPU) cannot be seen from
        # Python without private APIs, so there this reports False: it cannot observe sharing.
        if a.shape.num_elements() == 0 or b.shape.num_elements() == 0:
            return False
        if not all("CPU" in t.device for t in (a, b)):
            return False
        return np.shares_memory(self._host_buffer(a), self._host_buffer(b))

    @staticmethod
    def _host_buffer(x):
        if x.dtype == tf.bfloat16:  # DLPack has no bfloat16; bitcast keeps the buffer
            x = tf.bitcast(x, tf.uint16)
        if not hasattr(x, "__dlpack__"):  # TensorFlow before 2.17: its capsule, behind the protocol
            x = _HostCapsule(x)
        return np.from_dlpack(x)

    def grad_of_sum(self, fn, values, device=None):
        if device is None:
            x = tf.constant(values, dtype=tf.float64)
        else:
            with tf.device(str(device)):
                x = tf.constant(values, dtype=tf.float64)
        with tf.GradientTape() as tape:
            tape.watch(x)
            total = tf.reduce_sum(fn(x))
        return tape.gradient(total, x).numpy()

    def custom_gradient(self, forward, backward):
        @tf.custom_gradient
        def function(*inputs):
            return forward(*inputs), lambda grad: tuple(backward(*inputs, grad))

        return function

    wrong_gradient_count = r"custom_gradient function expected to return 1 gradients, but returned 2"

    def identity(self, count):
        @tf.custom_gradient
        def identity(*inputs):
            outputs = tuple(tf.identity(x) for x in inputs)

            def backward(*grads):
                return [tf.zeros_like(x) if g is None else g for x, g in zip(inputs, grads)]

            return (outputs if count > 1 else outputs[0]), backward

        return identity

    def views(self):
        return [("x", lambda x: x), ("tf.transpose(x)", tf.transpose), ("tf.reshape(x, [-1])",
                                                                       lambda x: tf.reshape(x, [-1])),
                ("x[0]", lambda x: x[0])]

    def in_place_kind(self, x):
        return self.special_kind(x)

    def stop_gradient(self, x):
        return tf.stop_gradient(x)

    def cast(self, x, dtype):
        return tf.cast(x, dtype)

    def gather_rows(self, weight, rows):
        with tf.device(weight.device):
            return tf.gather(weight, tf.constant(list(rows)))

    def special_kind(self, x):
        with tf.device(x.device):
            return tf.Variable(tf.identity(x))

    def out_of_memory(self):
        # Built as TensorFlow builds it: its allocator waits 10 s for memory before it refuses.
        return tf.errors.ResourceExhaustedError(
            None, None, "OOM when allocating tensor with shape[1000000,1000000] and type float")

    def on_host(self, array):
        with tf.device("/CPU:0"):
            return tf.identity(tf.constant(array))

    def address(self, x):
        return np.asarray(x).__array_interface__["data"][0]


HARNESS = TensorflowHarness()


class _HostCapsule:
    """A host tensor's DLPack capsule (``tf.experimental.dlpack.to_dlpack``) behind the protocol
    ``np.from_dlpack`` asks for, which EagerTensor has only from TensorFlow 2.17 on."""

    def __init__(self, tensor):
        self._tensor = tensor

    def __dlpack__(self, stream=None, **_):
        return tf.experimental.dlpack.to_dlpack(self._tensor)

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU: aliases() asks only about host-memory tensors

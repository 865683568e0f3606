"""The D2L "GPUs" chapter (Dive into Deep Learning, section "GPUs"), written once with devshim.

The same script runs under PyTorch, TensorFlow, MXNet and JAX, on a machine with zero, one or
two GPUs. It branches on the framework only where the frameworks themselves spell a thing
differently (making a tensor, a model); every device question goes through devshim.

    DEVSHIM_BACKEND=torch python examples/use_gpu.py
    DEVSHIM_BACKEND=tensorflow python examples/use_gpu.py
    DEVSHIM_BACKEND=mxnet python examples/use_gpu.py
    DEVSHIM_BACKEND=jax python examples/use_gpu.py
    DEVSHIM_VIRTUAL_DEVICES=2 python examples/use_gpu.py   # two virtual GPUs, on the CPU
    DEVSHIM_DEVICE=cpu python examples/use_gpu.py          # as if there were no GPU
"""

import contextlib

import numpy as np

import devshim as ds

backend = ds.get_backend().name


def show(t):
    """A tensor's values, copied to the host explicitly, rounded for printing."""
    return np.array2string(ds.to_numpy(t), precision=2, separator=", ").replace("\n", "")


# ---- Computing devices. Ask devshim first: virtual GPUs, if asked for, must exist before the
# framework makes its first tensor.
print(f"{backend}: {ds.num_gpus()} GPU(s); devices: {[str(ds.get_backend().describe(d)) for d in ds.devices()]}")
print(f"{backend}: try_gpu() is {ds.try_gpu()!r}, try_gpu(10) is {ds.try_gpu(10)!r} (no GPU 10: the CPU)")
print(f"{backend}: try_all_gpus() is {ds.try_all_gpus()!r} (never empty)")

# ---- The frameworks' own spelling: make a tensor on a device, run ops where the data is.
if backend == "torch":
    import torch

    def ones(shape, device):
        return torch.ones(shape, device=device)

    def rand(shape, device):
        return torch.rand(shape, device=device)

    def tensor(values):
        return torch.tensor(values)

    def on(device):  # torch runs an op where its inputs are
        return contextlib.nullcontext()

elif backend == "tensorflow":
    import tensorflow as tf

    def ones(shape, device):
        with device:  # devshim's TensorFlow devices are also `with` blocks
            return tf.ones(shape)

    def rand(shape, device):
        with device:
            return tf.random.uniform(shape)

    def tensor(values):
        return tf.constant(values)

    def on(device):  # TensorFlow runs an op under the device scope in force
        return ds.device(device)

elif backend == "mxnet":
    from mxnet import np as mxnp
    from mxnet import npx

    npx.set_np()

    def ones(shape, device):
        return mxnp.ones(shape, ctx=device)

    def rand(shape, device):
        return mxnp.random.uniform(size=shape, ctx=device)

    def tensor(values):
        return mxnp.array(values)

    def on(device):
        return contextlib.nullcontext()

elif backend == "jax":
    import jax
    import jax.numpy as jnp

    def ones(shape, device):
        return jax.device_put(jnp.ones(shape), device)

    def rand(shape, device):
        return jax.device_put(jax.random.uniform(jax.random.PRNGKey(0), shape), device)

    def tensor(values):
        return jnp.array(values)

    def on(device):  # JAX runs an op where its (committed) inputs are
        return contextlib.nullcontext()

else:
    raise SystemExit(f"this example follows the D2L chapter in PyTorch, TensorFlow, MXNet and JAX; "
                     f"the backend is {backend}")

# ---- Tensors and GPUs: a new tensor lives on the CPU.
x = tensor([1.0, 2.0, 3.0])
print(f"{backend}: a new tensor is on {ds.neutral_device(x)}")

# ---- Storage on the GPU (the CPU when there is none).
X = ones((2, 3), ds.try_gpu())
Y = rand((2, 3), ds.try_gpu(1))
print(f"{backend}: X is on {ds.neutral_device(X)}, Y is on {ds.neutral_device(Y)}")

# ---- Copying. X and Y may be on two devices; combining them is refused, not copied silently.
if not ds.same_device(X, Y):
    try:
        ds.ensure_same_device(X, Y)
    except ds.DeviceMismatchError as err:
        print(f"{backend}: X + Y would mix devices; ds.ensure_same_device(X, Y) says: {err}")
    with ds.transfer_guard("disallow"):  # the frameworks' own X + Y: refused as well
        try:
            with on(ds.try_gpu(1)):
                X + Y
            print(f"{backend}: X + Y ran")
        except Exception as err:
            print(f"{backend}: X + Y under transfer_guard('disallow') is refused ({type(err).__name__})")

Z = ds.to_device(X, ds.try_gpu(1))  # an explicit copy: new memory on GPU 1
print(f"{backend}: Z = ds.to_device(X, try_gpu(1)) is on {ds.neutral_device(Z)}")
with on(ds.try_gpu(1)):
    total = Y + Z
print(f"{backend}: Y + Z is on {ds.neutral_device(total)}: {show(total)}")

# Already there: copy_if_needed is a no-op (MXNet's as_in_ctx, torch's .to), to_device still copies.
print(f"{backend}: ds.copy_if_needed(Z, try_gpu(1)) is Z: {ds.copy_if_needed(Z, ds.try_gpu(1)) is Z}")
print(f"{backend}: ds.to_device(Z, try_gpu(1)) is Z: {ds.to_device(Z, ds.try_gpu(1)) is Z} (always a copy)")

# ---- Neural networks and GPUs: put the parameters where the data is.
device = ds.try_gpu()
if backend == "torch":
    net = ds.place_model(torch.nn.Sequential(torch.nn.Linear(3, 1)), device)
    forward = net
elif backend == "tensorflow":
    import keras

    net = ds.place_model(keras.Sequential([keras.layers.Dense(1)]), device, input_shape=(None, 3))
    forward = net
elif backend == "mxnet":
    from mxnet import gluon

    net = ds.place_model(gluon.nn.Dense(1, in_units=3), device)  # initialised on the device
    forward = net
else:  # JAX: a model is a pytree of parameters and a function
    rng = np.random.default_rng(0)
    net = ds.place_model({"w": jnp.asarray(rng.standard_normal((3, 1)), jnp.float32),
                          "b": jnp.zeros((1,))}, device)

    def forward(X):
        return X @ net["w"] + net["b"]

with on(device):
    out = forward(X)
print(f"{backend}: the model's parameters are on {ds.neutral_device(ds.model_device(net))}; net(X) is on {ds.neutral_device(out)}")
assert ds.model_device(net) == ds.device_of(X) == ds.device_of(out)  # the framework's own device objects

# ---- Side notes: read results on the host once, explicitly (printing a GPU tensor copies it too).
print(f"{backend}: net(X), copied to the host with ds.to_numpy: {show(out)}")

"""One model on one device: the D2L chapter's `net.to(try_gpu())`, for any framework.

    DEVSHIM_BACKEND=torch python examples/place_model.py
    DEVSHIM_BACKEND=tensorflow DEVSHIM_VIRTUAL_DEVICES=1 python examples/place_model.py
    DEVSHIM_BACKEND=mxnet python examples/place_model.py
"""

import numpy as np

import devshim as ds

backend = ds.get_backend().name
device = ds.try_gpu()  # GPU 0 if there is one (or a virtual one), else the CPU
X = np.ones((2, 3), dtype=np.float32)

if backend == "torch":
    import torch

    net = ds.place_model(torch.nn.Sequential(torch.nn.Linear(3, 1)), device)
    out = net(torch.from_numpy(X).to(device))
elif backend == "tensorflow":
    import keras

    ds.num_gpus()  # virtual GPUs, if asked for, must exist before Keras makes its first variable
    net = keras.Sequential([keras.layers.Dense(1)])
    net = ds.place_model(net, device, input_shape=(None, 3))  # built on the device
    with device:
        out = net(X)
elif backend == "mxnet":
    from mxnet import gluon, npx
    from mxnet import np as mxnp

    npx.set_np()
    net = ds.place_model(gluon.nn.Dense(1, in_units=3), device)  # initialised on the device
    out = net(mxnp.array(X, ctx=device))
else:
    raise SystemExit(f"this example places PyTorch, Keras and Gluon models; the backend is {backend}")

print(f"{backend}: the model's parameters are on {ds.model_device(net)}")
print(f"{backend}: its output is on {ds.device_of(out)}, shape {tuple(out.shape)}")
assert ds.model_device(net) == ds.device_of(out)

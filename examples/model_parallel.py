"""A model split over two devices, with explicit copies at the seams: Chainer's ParallelMLP.

The Chainer GPU guide builds an MLP whose layers are cut in two halves, one
per GPU, and exchanges activations between them with F.copy, whose gradient
flows back across the copy. Here the same network is written with devshim:
ds.place_model puts each half on its device, ds.copy_if_needed is the copy.
The split model must compute exactly what the same model does on one device.

    DEVSHIM_BACKEND=torch python examples/model_parallel.py
    DEVSHIM_BACKEND=tensorflow DEVSHIM_VIRTUAL_DEVICES=2 python examples/model_parallel.py
    DEVSHIM_BACKEND=mxnet DEVSHIM_VIRTUAL_DEVICES=2 python examples/model_parallel.py
"""

import numpy as np

import devshim as ds

backend = ds.get_backend().name
gpus = ds.try_all_gpus()
dev0, dev1 = gpus[0], gpus[-1]  # two GPUs (real or virtual), or the CPU twice
where = ds.neutral_device  # a framework's device object -> devshim's name for it ("gpu:0")
print(f"{backend}: splitting the model over {where(dev0)} and {where(dev1)}")
rng = np.random.default_rng(0)
X = rng.standard_normal((8, 6)).astype(np.float32)

if backend == "torch":
    import copy

    import torch
    from torch import nn

    class ParallelMLP(nn.Module):
        """Each stage has one half on each device; the halves swap activations at every seam."""

        def __init__(self, n_in=6, n_hidden=5, n_out=3):
            super().__init__()
            self.mlp1_gpu0, self.mlp1_gpu1 = nn.Linear(n_in, n_hidden), nn.Linear(n_in, n_hidden)
            self.mlp2_gpu0, self.mlp2_gpu1 = nn.Linear(n_hidden, n_out), nn.Linear(n_hidden, n_out)

        def forward(self, x):
            # x lives on dev0; the copies are the seams (Chainer's F.copy).
            z0 = self.mlp1_gpu0(x)
            z1 = self.mlp1_gpu1(ds.copy_if_needed(x, self.dev1))
            h0 = torch.relu(z0 + ds.copy_if_needed(z1, self.dev0))
            h1 = torch.relu(z1 + ds.copy_if_needed(z0, self.dev1))
            y0 = self.mlp2_gpu0(h0)
            y1 = self.mlp2_gpu1(h1)
            return y0 + ds.copy_if_needed(y1, self.dev0)

        def split(self, dev0, dev1):
            self.dev0, self.dev1 = dev0, dev1
            for name, part in self.named_children():
                ds.place_model(part, dev0 if name.endswith("gpu0") else dev1)
            return self

    torch.manual_seed(0)
    whole = ParallelMLP()
    whole.dev0 = whole.dev1 = ds.cpu()  # the same network, all of it on the CPU
    split = copy.deepcopy(whole).split(dev0, dev1)
    print(f"{backend}: first stage on {where(ds.model_device(split.mlp1_gpu0))} and {where(ds.model_device(split.mlp1_gpu1))}")

    x = torch.from_numpy(X)
    y_whole, y_split = whole(x), split(ds.to_device(x, dev0))
    y_whole.square().sum().backward()
    y_split.square().sum().backward()
    same_out = np.allclose(ds.to_numpy(y_split), ds.to_numpy(y_whole), atol=1e-5)
    same_grads = all(np.allclose(ds.to_numpy(a.grad), ds.to_numpy(b.grad), atol=1e-5)
                     for a, b in zip(whole.parameters(), split.parameters()))

elif backend == "mxnet":
    from mxnet import autograd, gluon, npx
    from mxnet import np as mxnp

    npx.set_np()

    class ParallelMLP(gluon.Block):
        def __init__(self, n_in=6, n_hidden=5, n_out=3):
            super().__init__()
            self.mlp1_gpu0, self.mlp1_gpu1 = gluon.nn.Dense(n_hidden, in_units=n_in), gluon.nn.Dense(n_hidden, in_units=n_in)
            self.mlp2_gpu0, self.mlp2_gpu1 = gluon.nn.Dense(n_out, in_units=n_hidden), gluon.nn.Dense(n_out, in_units=n_hidden)

        def forward(self, x):
            z0 = self.mlp1_gpu0(x)
            z1 = self.mlp1_gpu1(ds.copy_if_needed(x, self.dev1))
            h0 = npx.relu(z0 + ds.copy_if_needed(z1, self.dev0))
            h1 = npx.relu(z1 + ds.copy_if_needed(z0, self.dev1))
            return self.mlp2_gpu0(h0) + ds.copy_if_needed(self.mlp2_gpu1(h1), self.dev0)

        def place(self, dev0, dev1):
            self.dev0, self.dev1 = dev0, dev1
            for name, part in self._children.items():
                ds.place_model(part, dev0 if name.endswith("gpu0") else dev1)
            return self

    whole = ParallelMLP().place(ds.cpu(), ds.cpu())
    split = ParallelMLP().place(dev0, dev1)
    for (_, a), (_, b) in zip(whole.collect_params().items(), split.collect_params().items()):
        b.set_data(ds.to_device(a.data(), b.list_ctx()[0]))  # the same weights
    print(f"{backend}: first stage on {where(ds.model_device(split.mlp1_gpu0))} and {where(ds.model_device(split.mlp1_gpu1))}")

    outputs = []
    for net, device in ((whole, ds.cpu()), (split, dev0)):
        x = mxnp.array(X, ctx=device)
        with autograd.record():
            y = net(x)
            loss = (y ** 2).sum()
        loss.backward()
        outputs.append(y)
    same_out = np.allclose(ds.to_numpy(outputs[0]), ds.to_numpy(outputs[1]), atol=1e-5)
    same_grads = all(np.allclose(ds.to_numpy(a.grad(a.list_ctx()[0])), ds.to_numpy(b.grad(b.list_ctx()[0])), atol=1e-5)
                     for a, b in zip(whole.collect_params().values(), split.collect_params().values()))
elif backend == "tensorflow":
    import keras
    import tensorflow as tf

    ds.num_gpus()  # virtual GPUs, if asked for, must exist before Keras makes its first variable

    class ParallelMLP:
        """Keras places a layer's weights when the layer is built: build each half under its device."""

        def __init__(self, dev0, dev1, n_in=6, n_hidden=5, n_out=3):
            self.dev0, self.dev1 = dev0, dev1
            with dev0:
                self.mlp1_gpu0, self.mlp2_gpu0 = keras.layers.Dense(n_hidden), keras.layers.Dense(n_out)
                self.mlp1_gpu0.build((None, n_in)), self.mlp2_gpu0.build((None, n_hidden))
            with dev1:
                self.mlp1_gpu1, self.mlp2_gpu1 = keras.layers.Dense(n_hidden), keras.layers.Dense(n_out)
                self.mlp1_gpu1.build((None, n_in)), self.mlp2_gpu1.build((None, n_hidden))
            self.layers = [self.mlp1_gpu0, self.mlp1_gpu1, self.mlp2_gpu0, self.mlp2_gpu1]

        def __call__(self, x):
            # Every op runs under its half's device; the copies are the seams.
            with self.dev0:
                z0 = self.mlp1_gpu0(x)
            with self.dev1:
                z1 = self.mlp1_gpu1(ds.copy_if_needed(x, self.dev1))
                h1 = tf.nn.relu(z1 + ds.copy_if_needed(z0, self.dev1))
                y1 = self.mlp2_gpu1(h1)
            with self.dev0:
                h0 = tf.nn.relu(z0 + ds.copy_if_needed(z1, self.dev0))
                return self.mlp2_gpu0(h0) + ds.copy_if_needed(y1, self.dev0)

        @property
        def weights(self):
            return [w.value for layer in self.layers for w in layer.weights]

    whole, split = ParallelMLP(ds.cpu(), ds.cpu()), ParallelMLP(dev0, dev1)
    for a, b in zip(whole.layers, split.layers):  # the same weights, copied explicitly to each half
        for source, target in zip(a.weights, b.weights):
            target.assign(ds.to_device(source.value, ds.device_of(target.value)))
    print(f"{backend}: first stage on {where(ds.model_device(split.mlp1_gpu0))} and {where(ds.model_device(split.mlp1_gpu1))}")
    results = []
    for net, device in ((whole, ds.cpu()), (split, dev0)):
        x = ds.to_device(tf.constant(X), device)
        with device, tf.GradientTape() as tape:  # the loss where the output is, not on TF's default device
            y = net(x)
            loss = tf.reduce_sum(y ** 2)
        # TensorFlow runs every gradient op on the device scope of this call (eager and in
        # tf.function alike), not on its forward op's device: the second half's backward pass
        # runs on the first half's device and reads that half's activations across. Those
        # copies are TensorFlow's design, so they are allowed here, and only here.
        with device, ds.transfer_guard(device_to_device="allow"):
            results.append((y, tape.gradient(loss, net.weights)))
    (y_whole, g_whole), (y_split, g_split) = results
    same_out = np.allclose(ds.to_numpy(y_split), ds.to_numpy(y_whole), atol=1e-5)
    same_grads = all(np.allclose(ds.to_numpy(a), ds.to_numpy(b), atol=1e-5) for a, b in zip(g_whole, g_split))
else:
    raise SystemExit(f"this example covers PyTorch, Keras and MXNet Gluon; the backend is {backend}")

print(f"{backend}: the split model's output equals the single-device model's: {same_out}")
print(f"{backend}: and so do the gradients, which flowed back across the copies: {same_grads}")
assert same_out and same_grads

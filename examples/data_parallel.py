"""Data parallelism: one training step on every device at once (D2L's "multiple GPUs" chapter,
Chainer's ParallelUpdater), with devshim.

Each device gets a replica of the model and a shard of the batch; each computes
its gradients; the gradients are summed across devices (allreduce); every
replica takes the same step. The result must equal one step on the whole batch
on one device.

    DEVSHIM_BACKEND=torch python examples/data_parallel.py
    DEVSHIM_BACKEND=tensorflow DEVSHIM_VIRTUAL_DEVICES=2 python examples/data_parallel.py
    DEVSHIM_BACKEND=mxnet DEVSHIM_VIRTUAL_DEVICES=2 python examples/data_parallel.py
"""

import numpy as np

import devshim as ds

backend = ds.get_backend().name
devices = ds.try_all_gpus()
rng = np.random.default_rng(0)
X = rng.standard_normal((9, 4)).astype(np.float32)  # 9 examples: uneven over 2 or 4 devices
Y = rng.standard_normal((9, 2)).astype(np.float32)
LR = 0.01

if backend == "torch":
    import torch

    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    frame = torch.from_numpy

    def grads(model, x, y):
        model.zero_grad(set_to_none=True)
        ((model(x) - y) ** 2).sum().backward()
        return [p.grad for p in model.parameters()]

    def step(model, gs):
        with torch.no_grad():
            for p, g in zip(model.parameters(), gs):
                p -= LR * g

    def weights(model):
        return [ds.to_numpy(p) for p in model.parameters()]

elif backend == "tensorflow":
    import keras
    import tensorflow as tf

    ds.num_gpus()  # virtual GPUs, if asked for, must exist before Keras makes its first variable
    net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    frame = tf.constant

    def grads(model, x, y):
        with ds.model_device(model):  # compute where the replica's weights are (a TensorFlow device scope)
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum((model(x) - y) ** 2)
            return tape.gradient(loss, [w.value for w in model.trainable_weights])

    def step(model, gs):
        for w, g in zip(model.trainable_weights, gs):
            with tf.device(w.value.device):
                w.assign_sub(LR * g)

    def weights(model):
        return [np.array(w) for w in model.get_weights()]

elif backend == "mxnet":
    from mxnet import autograd, gluon, npx
    from mxnet import np as mxnp

    npx.set_np()
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(8, in_units=4, activation="relu"), gluon.nn.Dense(2, in_units=8))
    net.initialize()
    frame = mxnp.array

    def params(model):
        return list(model.collect_params().values())

    def grads(model, x, y):
        with autograd.record():
            loss = ((model(x) - y) ** 2).sum()
        loss.backward()
        return [p.grad(p.list_ctx()[0]) for p in params(model)]

    def step(model, gs):
        for p, g in zip(params(model), gs):
            p.set_data(p.data(p.list_ctx()[0]) - LR * g)

    def weights(model):
        return [ds.to_numpy(p.data(p.list_ctx()[0])) for p in params(model)]
else:
    raise SystemExit(f"this example trains PyTorch, Keras and Gluon models; the backend is {backend}")

# The reference: one step on the whole batch, on one device.
reference = ds.replicate(net, [devices[0]])[0]
step(reference, grads(reference, ds.to_device(frame(X), devices[0]), ds.to_device(frame(Y), devices[0])))

# The same step, data parallel.
replicas = ds.replicate(net, devices)
X_shards, Y_shards = ds.split_batch(frame(X), frame(Y), devices)
print(f"{backend}: {len(X)} examples over {len(devices)} device(s): shards of "
      f"{[int(s.shape[0]) for s in X_shards]} on {[str(ds.neutral_device(s)) for s in X_shards]}")
per_device = [grads(r, x, y) for r, x, y in zip(replicas, X_shards, Y_shards)]
summed = [ds.allreduce(list(g)) for g in zip(*per_device)]  # one list per parameter, one sum per device
for i, replica in enumerate(replicas):
    step(replica, [total[i] for total in summed])

same = all(np.allclose(a, b, atol=1e-5) for replica in replicas
           for a, b in zip(weights(replica), weights(reference)))
print(f"{backend}: every replica's weights equal the single-device step's: {same}")
assert same

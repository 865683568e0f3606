"""Training steps whose memory the tests estimate (`ds.estimate_memory`) and measure: an MLP and
a small CNN trained with Adam, in PyTorch and in JAX (Adam written out, as JAX has none of its own).
Each step builds what it uses, so an estimate of it needs no memory at all."""

from __future__ import annotations


def torch_mlp(batch: int, device="cpu", hidden: int = 1024, steps: int = 2, foreach=None):
    """D2L's MLP for Fashion-MNIST, wider: 784 -> hidden -> hidden -> 10, `steps` steps of Adam
    (`foreach`: Adam's, None for its device's default path)."""
    from torch import nn

    net = nn.Sequential(nn.Flatten(), nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                        nn.Linear(hidden, 10)).to(device)
    return _torch_train(net, (batch, 1, 28, 28), batch, device, steps, foreach=foreach)


def torch_cnn(batch: int, device="cpu", channels: int = 16, steps: int = 2, foreach=None):
    """A small CNN (LeNet's shape): conv, ReLU, max pool, conv, ReLU, max pool, linear; Adam."""
    from torch import nn

    net = nn.Sequential(nn.Conv2d(1, channels, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(channels, 2 * channels, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(2 * channels * 5 * 5, 10)).to(device)
    return _torch_train(net, (batch, 1, 28, 28), batch, device, steps, foreach=foreach)


def torch_wide(batch: int, device="cpu", width: int = 16384, layers: int = 10, steps: int = 2):
    """`layers` square linear layers of `width` (a billion bytes each at 16384) trained with Adam:
    parameters, gradients and Adam's two moments alone take 4 x 1 GiB a layer."""
    from torch import nn

    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    net = nn.Sequential(*blocks).to(device)
    return _torch_train(net, (batch, width), batch, device, steps, classes=width)


def _torch_train(net, shape: tuple, batch: int, device, steps: int, classes: int = 10, foreach=None):
    import torch

    optimizer = torch.optim.Adam(net.parameters(), foreach=foreach)
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(steps):  # the second step has Adam's state: the steady state of training
        x = torch.rand(*shape, device=device)
        y = torch.randint(0, classes, (batch,), device=device)
        optimizer.zero_grad(set_to_none=True)
        loss_fn(net(x), y).backward()
        optimizer.step()
    return net, optimizer


# ------------------------------------------------------------------ JAX


def jax_adam_step(model):
    """`step(state, x, y)`: one step of Adam on `model(params, x)`'s cross-entropy; `state` is
    (params, first moments, second moments, count), as `jax_state` makes it."""
    import jax
    import jax.numpy as jnp

    def loss(params, x, y):
        logits = model(params, x)
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, logits.shape[-1]), -1))

    def step(state, x, y, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
        params, m, v, t = state
        grads = jax.grad(loss)(params, x, y)
        t = t + 1
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
        params = jax.tree_util.tree_map(
            lambda p, m, v: p - lr * (m / (1 - b1 ** t)) / (jnp.sqrt(v / (1 - b2 ** t)) + eps), params, m, v)
        return params, m, v, t

    return step


def jax_state(params):
    import jax
    import jax.numpy as jnp

    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return params, zeros, jax.tree_util.tree_map(jnp.zeros_like, params), jnp.zeros((), jnp.int32)


def jax_mlp(key, sizes=(784, 1024, 1024, 10)):
    """(model, params) of an MLP of `sizes`, ReLU between."""
    import jax
    import jax.numpy as jnp

    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        key, k = jax.random.split(key)
        params.append((jax.random.normal(k, (a, b)) * 0.01, jnp.zeros(b)))

    def model(params, x):
        for w, b in params[:-1]:
            x = jax.nn.relu(x @ w + b)
        w, b = params[-1]
        return x @ w + b

    return model, params


#: The JAX CNN's shapes, which the tests' hand counts read too: its images, its kernel, its channels.
JAX_CNN_IMAGE, JAX_CNN_KERNEL, JAX_CNN_CHANNELS = (28, 28), (3, 3), 16


def jax_cnn(key, channels: int = JAX_CNN_CHANNELS):
    """(model, params) of a small CNN on (batch, 1, 28, 28) images: conv 3x3, ReLU, 2x2 max pool, linear."""
    import jax

    k1, k2 = jax.random.split(key)
    (height, width), (kernel_height, kernel_width) = JAX_CNN_IMAGE, JAX_CNN_KERNEL
    pooled = ((height - kernel_height + 1) // 2) * ((width - kernel_width + 1) // 2)
    params = [jax.random.normal(k1, (channels, 1, kernel_height, kernel_width)) * 0.1,
              jax.random.normal(k2, (channels * pooled, 10)) * 0.01]

    def model(params, x):
        conv, dense = params
        y = jax.nn.relu(jax.lax.conv_general_dilated(x, conv, (1, 1), "VALID"))
        y = jax.lax.reduce_window(y, -jax.numpy.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        return y.reshape(y.shape[0], -1) @ dense

    return model, params


def jax_training(name: str, batch: int, device):
    """`(step, state, x, y)`: one step of Adam on the MLP (`"mlp"`, on (batch, 784) inputs) or the
    small CNN (`"cnn"`, on (batch, 1, 28, 28) images), its arguments placed on `device`: the step
    the tests and the GPU check estimate and run."""
    import jax
    import jax.numpy as jnp

    model, params = (jax_mlp if name == "mlp" else jax_cnn)(jax.random.PRNGKey(0))
    shape = (batch, 784) if name == "mlp" else (batch, 1, *JAX_CNN_IMAGE)
    state = jax.device_put(jax_state(params), device)
    x, y = jax.device_put(jnp.ones(shape), device), jax.device_put(jnp.zeros((batch,), jnp.int32), device)
    return jax_adam_step(model), state, x, y

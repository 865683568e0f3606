"""The operations `devshim bench` needs, in PyTorch (imported only when an experiment runs)."""

from __future__ import annotations

import torch


def rand(shape, device):
    """float32 normal samples of `shape` on `device`."""
    return torch.randn(shape, device=device)


matmul = torch.matmul
add = torch.add
stack = torch.stack
concat = torch.cat


def norm(x):
    """The Frobenius norm, left on the device."""
    return torch.linalg.norm(x)


def split(x, sections):
    """`x` split along dim 0 into pieces of the given sizes."""
    return list(torch.split(x, list(sections)))


def item(x):
    """The framework's implicit host read of a one-element tensor."""
    return x.item()


def from_numpy(values, device):
    """A tensor holding a copy of NumPy array `values` (its dtype and shape), made on `device`."""
    return torch.tensor(values, device=device)


# A small model and its forward pass, for `devshim selftest`'s placement checks.
def small_model(n_in, n_out, seed=0):
    """An MLP (linear, ReLU, linear) on the CPU, seeded."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(n_in, 8), torch.nn.ReLU(), torch.nn.Linear(8, n_out))


def forward(model, x):
    with torch.no_grad():
        return model(x)

def train_step(model, x, y, lr=0.01):
    """One SGD step of `model` on squared error: forward, backward, update in place.
    Returns `(loss, model)`, the loss on the device (`devshim bench memory`).

    Example:
        >>> loss, model = train_step(model, x, y)
    """
    model.zero_grad(set_to_none=True)
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter -= lr * parameter.grad
    return loss.detach(), model


# The framework's own spelling of devshim's calls: the overhead experiment's baselines.


def native_calls(x, device) -> dict:
    """What a user writes without devshim, as the timed callables of `devshim bench overhead`:
    `device_of`, `copy_if_needed` and `to_device` of `x` to `device`, each the
    framework's own expression written inline (no helper call in the baseline).

    Example:
        >>> native_calls(x, device)["device_of"]()
        device(type='cpu')
    """
    return {
        "device_of": lambda: x.device,
        "copy_if_needed": lambda: x.to(device),
        "to_device": lambda: x.to(device, copy=True),
    }


def native_copy_dict(leaves: dict, device) -> dict:
    """`{key: copy of value on device}` as a user writes it: a dict comprehension."""
    return {key: value.to(device, copy=True) for key, value in leaves.items()}


def native_copy_lists(nest: dict, device) -> dict:
    """`{key: [copies on device]}` for a dict of lists of tensors, written out by hand."""
    return {key: [value.to(device, copy=True) for value in values] for key, values in nest.items()}


# D2L's LeNet from "Multiple GPUs from scratch" (the chapter's own torch calls), for
# `devshim bench virtual`: the same epoch on the CPU and on a virtual GPU.


def threads() -> int:
    """How many threads torch runs its CPU kernels on."""
    return torch.get_num_threads()


def set_threads(count: int) -> int:
    """Run torch's CPU kernels on `count` threads; returns the count before."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    return before


def lenet_batches(examples: int, batch_size: int, seed: int = 0) -> list:
    """Synthetic Fashion-MNIST-shaped data on the CPU: `(X, y)` batches of `batch_size`
    (the last one smaller when `examples` does not divide), X of shape (n, 1, 28, 28)."""
    generator = torch.Generator().manual_seed(seed)
    X = torch.rand((examples, 1, 28, 28), generator=generator)
    y = torch.randint(0, 10, (examples,), generator=generator)
    return list(zip(X.split(batch_size), y.split(batch_size)))


def lenet_epoch(batches: list, device, lr: float = 0.2, seed: int = 0):
    """One epoch of the chapter's from-scratch LeNet on `device`: fresh parameters (seeded,
    the chapter's shapes and scale) moved there, each batch copied there, forward, backward,
    minibatch SGD. Returns the last batch's loss, on `device`.

    Example:
        >>> loss = lenet_epoch(lenet_batches(64, 16), torch.device("cpu"))
    """
    F = torch.nn.functional
    generator = torch.Generator().manual_seed(seed)
    scale = 0.01
    params = [torch.randn((20, 1, 3, 3), generator=generator) * scale, torch.zeros(20),
              torch.randn((50, 20, 5, 5), generator=generator) * scale, torch.zeros(50),
              torch.randn((800, 128), generator=generator) * scale, torch.zeros(128),
              torch.randn((128, 10), generator=generator) * scale, torch.zeros(10)]
    params = [p.to(device) for p in params]
    for p in params:
        p.requires_grad_()
    loss = torch.nn.CrossEntropyLoss(reduction="none")
    last = None
    for X, y in batches:
        X, y = X.to(device), y.to(device)
        h1 = F.avg_pool2d(input=F.relu(F.conv2d(input=X, weight=params[0], bias=params[1])),
                          kernel_size=(2, 2), stride=(2, 2))
        h2 = F.avg_pool2d(input=F.relu(F.conv2d(input=h1, weight=params[2], bias=params[3])),
                          kernel_size=(2, 2), stride=(2, 2))
        h2 = h2.reshape(h2.shape[0], -1)
        h3 = F.relu(torch.mm(h2, params[4]) + params[5])
        l = loss(torch.mm(h3, params[6]) + params[7], y).sum()  # noqa: E741 (the book's name)
        l.backward()
        with torch.no_grad():  # d2l.sgd
            for param in params:
                param -= lr * param.grad / X.shape[0]
                param.grad.zero_()
        last = l.detach()
    return last

"""The operations ``devshim bench`` needs, in PyTorch (imported only when an experiment runs)."""

from __future__ import annotations

import torch


def rand(shape, device):
    """float32 normal samples of ``shape`` on ``device``."""
    return torch.randn(shape, device=device)


matmul = torch.matmul
add = torch.add


def norm(x):
    """The Frobenius norm, left on the device."""
    return torch.linalg.norm(x)


def stack(xs):
    return torch.stack(xs)


def concat(xs):
    return torch.cat(xs)


def split(x, sections):
    """``x`` split along dim 0 into pieces of the given sizes."""
    return list(torch.split(x, list(sections)))


def item(x):
    """The framework's implicit host read of a one-element tensor."""
    return x.item()


def from_numpy(values, device):
    """A tensor holding a copy of NumPy array ``values`` (its dtype and shape), made on ``device``."""
    return torch.tensor(values, device=device)


# A small model and its forward pass, for ``devshim selftest``'s placement checks.
def small_model(n_in, n_out, seed=0):
    """An MLP (linear, ReLU, linear) on the CPU, seeded."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(n_in, 8), torch.nn.ReLU(), torch.nn.Linear(8, n_out))


def forward(model, x):
    with torch.no_grad():
        return model(x)


# The framework's own spelling of devshim's calls: the overhead experiment's baselines.


def native_calls(x, device) -> dict:
    """What a user writes without devshim, as the timed callables of ``devshim bench overhead``:
    ``device_of``, ``copy_if_needed`` and ``to_device`` of ``x`` to ``device``, each the
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
    """``{key: copy of value on device}`` as a user writes it: a dict comprehension."""
    return {key: value.to(device, copy=True) for key, value in leaves.items()}


def native_copy_lists(nest: dict, device) -> dict:
    """``{key: [copies on device]}`` for a dict of lists of tensors, written out by hand."""
    return {key: [value.to(device, copy=True) for value in values] for key, values in nest.items()}

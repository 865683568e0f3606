"""PyTorch's autodiff for ``ds.testing.check_backward``: ``torch.autograd.grad`` (a
``torch.autograd.Function``'s own ``backward`` included) on detached copies of the inputs
that require grad, so the caller's tensors keep their ``.grad`` and their graph."""

from __future__ import annotations

import torch

from devshim._tree import iter_leaves
from devshim.backends.autodiff_base import Autodiff

__all__ = ["TorchAutodiff"]


class TorchAutodiff(Autodiff):
    """``torch.autograd.grad`` of ``f``'s outputs with respect to its inputs.

    Example:
        >>> outputs, pullback = TorchAutodiff().vjp(torch.exp, (torch.zeros(2),))
        >>> pullback(torch.ones(2))
        [tensor([1., 1.])]
    """

    def vjp(self, f, inputs: tuple):
        leaves = tuple(x.detach().requires_grad_(True) for x in inputs)
        with torch.enable_grad():
            outputs = f(*leaves)

        def pullback(grad_outputs) -> list:
            pairs = [(y, gy) for (_, y), (_, gy) in zip(iter_leaves(outputs), iter_leaves(grad_outputs))
                     if isinstance(y, torch.Tensor) and y.requires_grad]
            if not pairs:  # no output depends on an input: autograd has nothing to run
                return [None] * len(leaves)
            ys, gys = zip(*pairs)
            return list(torch.autograd.grad(ys, leaves, gys, allow_unused=True))

        return outputs, pullback

    def set_element(self, x, index: tuple, value: float) -> None:
        with torch.no_grad():  # a leaf that requires grad may be written outside autograd only
            x[index] = value

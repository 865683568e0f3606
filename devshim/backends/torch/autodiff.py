"""PyTorch's autodiff for `ds.testing`'s gradient checks: `torch.autograd.grad` (a
`torch.autograd.Function`'s own `backward` included) on the checks' private copies of the
inputs, so the caller's tensors keep their values, `.grad` and graph; module parameters
`f` reads keep their `.grad` too (`autograd.grad` writes none). Sparse gradients
(`F.embedding(..., sparse=True)`) come back dense."""

from __future__ import annotations

import contextlib

import torch

from devshim.backends.autodiff_base import Autodiff

__all__ = ["TorchAutodiff"]


def _dense(gradient):
    return gradient if gradient is None or gradient.layout == torch.strided else gradient.to_dense()


class TorchAutodiff(Autodiff):
    """`torch.autograd.grad` of `f`'s outputs with respect to its inputs.

    Example:
        >>> outputs, pullback = TorchAutodiff().vjp(lambda x: [torch.exp(x)], (torch.zeros(2),))
        >>> pullback([torch.ones(2)])
        [tensor([1., 1.])]
    """

    def vjp(self, f, inputs: tuple):
        leaves = tuple(x.requires_grad_(True) for x in inputs)  # the checks' own copies
        with torch.enable_grad():
            outputs = f(*leaves)

        def pullback(grad_outputs: list) -> list:
            return _gradients(outputs, leaves, grad_outputs, create_graph=False)

        return outputs, pullback

    def gradient_function(self, f, count: int):
        def first_order(*arguments) -> list:
            xs, gys = arguments[:count], arguments[count:]
            create_graph = any(a.requires_grad for a in arguments)  # inside an outer vjp
            with torch.enable_grad():
                leaves = tuple(x if x.requires_grad else x.detach().requires_grad_(True) for x in xs)
                found = _gradients(f(*leaves), leaves, list(gys), create_graph=create_graph)
            return [torch.zeros_like(x) if g is None else g for x, g in zip(xs, found)]

        return first_order

    def copy_like(self, x, fresh):
        if isinstance(x, torch.nn.Parameter):
            return torch.nn.Parameter(fresh, requires_grad=x.requires_grad)
        return fresh.requires_grad_(x.requires_grad)

    def gradient_like(self, x, fresh):
        return fresh

    @contextlib.contextmanager
    def full_precision(self):
        matmul = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")
        try:
            with contextlib.ExitStack() as stack:
                _cudnn_without_tf32(stack)
                yield
        finally:
            torch.set_float32_matmul_precision(matmul)

    def set_element(self, x, index: tuple, value: float) -> None:
        with torch.no_grad():  # a leaf that requires grad may be written outside autograd only
            x[index] = value

    def assign(self, x, fresh) -> None:
        with torch.no_grad():
            x.copy_(fresh)


def _gradients(outputs: list, leaves: tuple, grad_outputs: list, create_graph: bool) -> list:
    pairs = [(y, gy) for y, gy in zip(outputs, grad_outputs) if isinstance(y, torch.Tensor) and y.requires_grad]
    if not pairs:  # no output depends on an input: autograd has nothing to run
        return [None] * len(leaves)
    ys, gys = zip(*pairs)
    found = torch.autograd.grad(ys, leaves, gys, allow_unused=True, create_graph=create_graph)
    return [_dense(g) for g in found]


def _cudnn_without_tf32(stack: contextlib.ExitStack) -> None:
    """cuDNN's convolutions in full float32 until `stack` closes (torch's own `cudnn.flags`
    block, which restores the flags); left as they are where torch cannot say what they are
    (its TF32 settings mixed across its old and new interfaces raise on reading)."""
    cudnn = torch.backends.cudnn
    try:
        stack.enter_context(cudnn.flags(enabled=cudnn.enabled, benchmark=cudnn.benchmark,
                                        deterministic=cudnn.deterministic, allow_tf32=False))
    except RuntimeError:
        pass

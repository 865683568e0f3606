"""PyTorch's autodiff for `ds.testing`'s gradient checks: `torch.autograd.grad` (a
`torch.autograd.Function`'s own `backward` included) on the checks' private copies of the
inputs, so the caller's tensors keep their values, `.grad` and graph; module parameters
`f` reads keep their `.grad` too (`autograd.grad` writes none). Sparse gradients
(`F.embedding(..., sparse=True)`) come back dense. TF32 is turned off for a check's
duration; where torch refuses that, `PrecisionWarning` says what to set."""

from __future__ import annotations

import contextlib
import warnings

import torch

from devshim.backends.autodiff_base import Autodiff
from devshim.errors import PrecisionWarning

__all__ = ["TorchAutodiff"]


class TorchAutodiff(Autodiff):
    """`torch.autograd.grad` of `f`'s outputs with respect to its inputs.

    Example:
        >>> outputs, pullback = TorchAutodiff().vjp(lambda x: [torch.exp(x)], (torch.zeros(2),), [True])
        >>> pullback([torch.ones(2)])
        [tensor([1., 1.])]
    """

    def vjp(self, f, inputs: tuple, wrt: list, params: list = ()):
        leaves = tuple(x.requires_grad_(True) if w else x for x, w in zip(inputs, wrt))  # the checks' own copies
        with torch.enable_grad():
            outputs = f(*leaves)

        def pullback(grad_outputs: list) -> list:
            found = _gradients(outputs, [x for x, w in zip(leaves, wrt) if w] + list(params), grad_outputs, False)
            moving = iter(found)
            return [next(moving) if w else None for w in wrt] + list(moving)

        return outputs, pullback

    def gradient_function(self, f, count: int, wrt: list, params: list = ()):
        def first_order(*arguments) -> list:
            xs, gys = arguments[:count], arguments[count:]
            create_graph = any(a.requires_grad for a in arguments)  # inside an outer vjp
            with torch.enable_grad():
                leaves = tuple(x if not w or x.requires_grad else x.detach().requires_grad_(True)
                               for x, w in zip(xs, wrt))
                targets = [x for x, w in zip(leaves, wrt) if w] + list(params)
                found = _gradients(f(*leaves), targets, list(gys), create_graph=create_graph)
            return [torch.zeros_like(x) if g is None else g for x, g in zip(targets, found)]

        return first_order

    @contextlib.contextmanager
    def differentiating(self, params: list):
        unmarked = [p for p in params if not p.requires_grad]
        for p in unmarked:
            p.requires_grad_(True)
        try:
            yield
        finally:
            for p in unmarked:
                p.requires_grad_(False)

    def retype(self, x, fresh):
        held = x.data
        x.data = fresh

        def restore() -> None:
            x.data = held

        return restore

    def copy_like(self, x, fresh):
        if isinstance(x, torch.nn.Parameter):
            return torch.nn.Parameter(fresh, requires_grad=x.requires_grad)
        return fresh.requires_grad_(x.requires_grad)

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


def _gradients(outputs: list, targets: list, grad_outputs: list, create_graph: bool) -> list:
    pairs = [(y, gy) for y, gy in zip(outputs, grad_outputs) if isinstance(y, torch.Tensor) and y.requires_grad]
    if not pairs or not targets:  # no output depends on an input: autograd has nothing to run
        return [None] * len(targets)
    ys, gys = zip(*pairs)
    found = torch.autograd.grad(ys, targets, gys, allow_unused=True, create_graph=create_graph)
    return [g if g is None or g.layout == torch.strided else g.to_dense() for g in found]  # sparse ones dense


def _cudnn_without_tf32(stack: contextlib.ExitStack) -> None:
    """cuDNN's convolutions in full float32 until `stack` closes (torch's own `cudnn.flags`
    block, which restores the flags). Where torch refuses (its TF32 settings mixed across its
    old and new interfaces raise on reading), `PrecisionWarning` says so and what to set."""
    cudnn = torch.backends.cudnn
    try:
        stack.enter_context(cudnn.flags(enabled=cudnn.enabled, benchmark=cudnn.benchmark,
                                        deterministic=cudnn.deterministic, allow_tf32=False))
    except RuntimeError as err:
        warnings.warn(
            f"torch could not turn TF32 off for cuDNN in this gradient check (torch.backends.cudnn.flags raised "
            f"RuntimeError: {err}), so its convolutions may round float32 to TF32's 10 bits and their central "
            f"differences be noise. Set the precision yourself before the check, with one interface of torch's: "
            f"torch.backends.cudnn.conv.fp32_precision = 'ieee' (torch 2.9 and later), or "
            f"torch.backends.cudnn.allow_tf32 = False; or check in float64.", PrecisionWarning, stacklevel=2)

"""The operations ``devshim bench`` needs, in MXNet (imported only when an experiment runs).

They use the classic ``mx.nd`` front-end, which works whether or not ``npx.set_np()``
was called in the thread running the experiment.
"""

from __future__ import annotations

import mxnet as mx


def rand(shape, device):
    """float32 normal samples of ``shape`` on ``device``."""
    return mx.nd.random.normal(shape=shape, ctx=device, dtype="float32")


matmul = mx.nd.dot
add = mx.nd.add


def norm(x):
    """The Frobenius norm, left on the device."""
    return mx.nd.norm(x)


def stack(xs):
    return mx.nd.stack(*xs)


def concat(xs):
    return mx.nd.concat(*xs, dim=0)


def split(x, sections):
    """``x`` split along axis 0 into pieces of the given sizes."""
    pieces, start = [], 0
    for size in sections:
        pieces.append(x[start:start + size])
        start += size
    return pieces


def item(x):
    """The framework's implicit host read of a one-element array."""
    return x.asscalar()


# The framework's own spelling of devshim's calls: the overhead experiment's baselines.
def native_copy(x, device):
    return x.copyto(device)


def native_move(x, device):
    return x.as_in_context(device)


def native_device_of(x):
    return x.ctx

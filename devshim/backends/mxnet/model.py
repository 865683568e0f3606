"""Placing Gluon blocks: initialise on the device, or move initialised parameters with `reset_ctx`.

Gluon's forward pre-hooks are called with a block's inputs but cannot change
them, so devshim cannot copy a split model's inputs at the seams for you:
`place_model` with a device map refuses, saying how to split by hand
(place each block, copy at the seams in `forward` with `ds.copy_if_needed`).
"""

from __future__ import annotations

import copy

import mxnet as mx
import numpy
from mxnet.gluon.parameter import DeferredInitializationError

from devshim.backends.model_base import ModelPlacement
from devshim.backends.mxnet import _internals
from devshim.errors import UnbuiltModelError, UnsupportedPlacementError


def _params(block) -> list:
    return list(block.collect_params().items())


def _deferred(param) -> bool:
    """Whether Gluon deferred `param`'s initialisation until its shape is known."""
    deferred = _internals.DEFERRED_INIT.get()
    return bool(deferred and getattr(param, deferred))


def _initialised(param) -> bool:
    try:
        param.data(param.list_ctx()[0])
    except (DeferredInitializationError, RuntimeError):  # deferred, or "has not been initialized"
        return False
    return True


def _nbytes(param) -> int:
    """The bytes of an initialised `param`'s array (on its first context)."""
    data = param.data(param.list_ctx()[0])
    return data.size * numpy.dtype(data.dtype).itemsize


class GluonPlacement(ModelPlacement):
    """Placement of Gluon blocks (the contract: `devshim.backends.model_base.ModelPlacement`).

    Example:
        >>> ds.backends.model_placement("mxnet").is_model(net)
        True
    """

    def is_model(self, obj) -> bool:
        return isinstance(obj, mx.gluon.Block)

    def named_places(self, block, adapter) -> list:
        params = _params(block)
        waiting = [name for name, p in params if not _initialised(p)]
        if waiting or not params:
            what = (f"{', '.join(waiting[:4])} {'are' if len(waiting) > 1 else 'is'} not initialised yet "
                    f"(Gluon defers it until the first forward pass when shapes are unknown)"
                    if waiting else "it has no parameters")
            raise UnbuiltModelError(
                f"This {type(block).__name__} is on no device yet: {what}. Initialise it on a device with "
                f"ds.place_model(net, device) and run one forward pass, then ask again."
            )
        return [(name, adapter.describe(ctx)) for name, p in params for ctx in p.list_ctx()]

    def place(self, block, native, adapter, input_shape=None):
        params = _params(block)
        if any(not _initialised(p) and not _deferred(p) for _, p in params):
            block.initialize(ctx=native)  # never initialised: create the parameters on the device
        else:
            # Initialised (or waiting for shapes): move them. reset_ctx re-creates the gradient
            # buffers on the new device, zeroed.
            block.collect_params().reset_ctx(native)
        return block

    def child_sizes(self, block) -> list:
        children = _internals.CHILDREN.get()
        return [(name, sum(_nbytes(p) for p in child.collect_params().values() if _initialised(p)))
                for name, child in (getattr(block, children).items() if children else ())]

    def place_map(self, block, natives: dict, adapter):
        raise UnsupportedPlacementError(
            "Gluon's forward pre-hooks cannot change a block's inputs, so devshim cannot copy them to "
            "each part's device for you. Split the model by hand, as Chainer's ParallelMLP does: "
            "ds.place_model(part, device) for each part, and in forward copy at the seams with "
            "x = ds.copy_if_needed(x, device) (gradients flow back across it). "
            "See examples/model_parallel.py."
        )

    def unplace(self, block) -> None:
        """Gluon blocks never get devshim hooks: nothing to remove."""

    def replicate(self, block, natives: list, adapter) -> list:
        self.named_places(block, adapter)  # refuses blocks that are not initialised yet
        replicas = []
        for native in natives:
            replica = copy.deepcopy(block)
            replica.collect_params().reset_ctx(native)
            for (_, mine), (_, theirs) in zip(_params(block), _params(replica)):
                theirs.set_data(mine.data(mine.list_ctx()[0]).copyto(native))
            replicas.append(replica)
        return replicas


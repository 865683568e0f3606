"""Placing models: one device, split across devices, and data parallel.

The three patterns of the seeds, for torch ``nn.Module``s, Gluon blocks and
Keras models (each framework's code is its backend package's ``model.py``):

- one model on one device: ``net = ds.place_model(net, ds.try_gpu())``;
- a model split over devices, with explicit copies at the seams:
  ``ds.place_model(net, {"block1": gpu0, "block2": gpu1})`` (Chainer's ``F.copy``);
- data parallel: ``ds.split_batch``, ``ds.replicate``, ``ds.allreduce``
  (D2L's multiple-GPUs chapter, Chainer's ``ParallelUpdater``); ``allreduce`` also
  sums across processes when a torch.distributed process group runs.

Every copy these make goes through ``devshim.transfer``, so a
``ds.transfer_guard("disallow")`` block lets them all through.
"""

from __future__ import annotations

from devshim import transfer
from devshim.backends import backend_for_tensor, get_backend, model_placement, specs
from devshim.errors import BatchSplitError, DeviceMismatchError, NotAModelError, NotATensorError

__all__ = [
    "place_model", "model_device", "model_devices", "unplace",
    "split_batch", "replicate", "allreduce",
]


# ------------------------------------------------------------------ which framework


def _model_module(net):
    """(adapter, the backend's ModelPlacement) for a model of a loaded framework."""
    for name, spec in specs().items():
        if spec.is_loaded():
            placement = model_placement(name)
            if placement is not None and placement.is_model(net):
                return get_backend(name), placement
    can = [name for name, spec in specs().items() if spec.has_module("model")]
    raise NotAModelError(
        f"{type(net).__module__}.{type(net).__qualname__} is not a model devshim can place. It places "
        f"the models of these backends: {', '.join(can)} (a torch nn.Module, a Gluon Block, a Keras "
        f"model). To copy tensors, use ds.to_device or ds.copy_if_needed."
    )


# ------------------------------------------------------------------ one device, or a map


def place_model(net, device, *, input_shape=None):
    """Put every parameter and buffer of ``net`` on ``device``; always use the return value.

    ``device`` is a device spec (``ds.try_gpu()``, ``"gpu:1"``), or, to split the
    model over devices, a mapping ``{"submodule.name": device}`` or
    ``"balanced"`` (top-level children spread over ``ds.try_all_gpus()`` by
    parameter bytes). A split model gets hooks that copy each placed block's
    inputs to its device before it runs (explicitly: gradients flow back
    across the copy, and the transfer guard allows it); ``ds.unplace(net)``
    removes them.

    - torch: ``module.to(device)``: non-persistent buffers move, tied weights stay tied.
    - Gluon: ``initialize(ctx=device)`` when uninitialised, else ``reset_ctx`` (gradients
      are re-zeroed).
    - Keras: an unbuilt model is built under the device (give ``input_shape`` when
      Keras cannot know it); a built model elsewhere is cloned onto the device with
      its weights copied: optimizer state is not carried.

    Example:
        >>> net = ds.place_model(nn.Sequential(nn.Linear(3, 1)), ds.try_gpu())
        >>> net = ds.place_model(net, {"0": "gpu:0", "2": "gpu:1"})   # a split model
    """
    adapter, module = _model_module(net)
    if isinstance(device, str) and device.strip().lower() == "balanced":
        device = _balanced(adapter, module, net)
    if isinstance(device, dict):
        natives = {name: adapter.device(spec) for name, spec in device.items()}
        with transfer.explicit():
            return module.place_map(net, natives, adapter)
    native = adapter.device(device)
    with transfer.explicit():
        return module.place(net, native, adapter, input_shape=input_shape)


def _balanced(adapter, module, net) -> dict:
    devices = adapter.try_all_gpus()
    sizes = module.child_sizes(net)
    if not sizes:
        raise NotAModelError(f"'balanced' splits a model's top-level children, and this {type(net).__name__} has none.")
    total = sum(size for _, size in sizes) or 1
    share = total / len(devices)
    mapping, used = {}, 0
    for name, size in sizes:
        index = min(int((used + size / 2) // share), len(devices) - 1)
        mapping[name] = devices[index]
        used += size
    return mapping


def unplace(net):
    """Remove the input-copying hooks a split ``place_model`` added; the parameters stay put.

    Example:
        >>> ds.unplace(net)
    """
    _, module = _model_module(net)
    module.unplace(net)
    return net


def model_devices(net) -> set:
    """The set of Devices ``net``'s parameters and buffers live on.

    Example:
        >>> ds.model_devices(net)
        {Device('cpu:0', backend='torch')}
    """
    adapter, module = _model_module(net)
    return {place for _, place in module.named_places(net, adapter)}


def model_device(net):
    """The one Device all of ``net``'s parameters and buffers share.

    A model spread over devices raises ``DeviceMismatchError`` listing the
    parameter names on each; a model with no parameters yet (lazy layers, an
    unbuilt Keras model) raises ``UnbuiltModelError`` saying what to do.

    Example:
        >>> ds.model_device(ds.place_model(net, "cpu"))
        Device('cpu:0', backend='torch')
    """
    adapter, module = _model_module(net)
    by_place: dict = {}
    for name, place in module.named_places(net, adapter):
        by_place.setdefault(place, []).append(name)
    if len(by_place) == 1:
        return next(iter(by_place))
    listing = "; ".join(
        f"{place}: {', '.join(names[:6])}{' and %d more' % (len(names) - 6) if len(names) > 6 else ''}"
        for place, names in by_place.items()
    )
    raise DeviceMismatchError(
        f"This {type(net).__name__} is spread over {len(by_place)} devices ({listing}). Use "
        f"ds.model_devices(net) to get them all, or ds.place_model(net, device) to put it on one."
    )


# ------------------------------------------------------------------ data parallel


def split_batch(*tensors, devices=None):
    """Split each tensor along its first axis into one shard per device, each on its device.

    ``split_batch(X, y, devices)`` (D2L's call) returns ``(X_shards, y_shards)``;
    with one tensor, its shard list. Uneven batches give the first shards one
    example more (9 rows over 4 devices: 3, 2, 2, 2), so no device idles;
    fewer examples than devices raises ``BatchSplitError`` (a ``ValueError``).
    Shards already on their device are views, not copies.

    Example:
        >>> X_shards, y_shards = ds.split_batch(X, y, ds.try_all_gpus())
    """
    if devices is None:
        if len(tensors) < 2:
            raise TypeError("split_batch needs tensors and devices: split_batch(X, y, devices).")
        *tensors, devices = tensors
    devices = list(devices)
    if not devices:
        raise ValueError("split_batch needs at least one device; ds.try_all_gpus() never gives none.")
    if not tensors:
        raise TypeError("split_batch needs at least one tensor to split.")
    results = []
    with transfer.explicit():
        for x in tensors:
            adapter = _adapter_of(x, "split_batch")
            n = len(x)
            if n < len(devices):
                raise _too_few(n, len(devices))
            if len({len(t) for t in tensors}) != 1:
                raise BatchSplitError(
                    f"split_batch splits examples, so every tensor needs the same first dimension; got "
                    f"{[len(t) for t in tensors]}."
                )
            base, extra = divmod(n, len(devices))
            shards, start = [], 0
            for i, device in enumerate(devices):
                stop = start + base + (1 if i < extra else 0)
                shards.append(adapter.copy_if_needed(adapter.narrow(x, start, stop), adapter.device(device)))
                start = stop
            results.append(shards)
    return results[0] if len(results) == 1 else tuple(results)


def _too_few(n: int, count: int) -> Exception:
    return BatchSplitError(
        f"split_batch got {n} example{'s' if n != 1 else ''} for {count} devices: every device needs at "
        f"least one. Use a batch of {count} or more, or fewer devices (devices[:{n}])."
    )


def _adapter_of(x, function: str):
    adapter = backend_for_tensor(x)
    if adapter is None:
        raise NotATensorError.for_value(x, function)
    return adapter


def replicate(net, devices) -> list:
    """Independent copies of ``net``, one on each device, with equal weights.

    Example:
        >>> replicas = ds.replicate(net, ds.try_all_gpus())
    """
    adapter, module = _model_module(net)
    natives = [adapter.device(d) for d in devices]
    with transfer.explicit():
        return module.replicate(net, natives, adapter)


def allreduce(tensors) -> list:
    """The sum of ``tensors``, one result on each tensor's own device (D2L's allreduce).

    Everything is added on the first tensor's device, then copied to each
    device, explicitly; every result is its own tensor. The inputs are left as
    they are: assign the results back where needed (``p.grad = total``).

    Hierarchical: when torch.distributed's default process group is initialised
    (``ds.init_distributed()``, or your own ``init_process_group``) and the tensors
    are torch tensors, the local sum is also summed across every process of the
    job (``torch.distributed.all_reduce``) before it is handed out, so one call
    serves one process or many. That cross-process sum is not recorded by autograd.

    Example:
        >>> grads = ds.allreduce([p.grad for p in params_on_each_device])
    """
    tensors = list(tensors)
    if not tensors:
        raise ValueError("allreduce needs at least one tensor.")
    adapter = _adapter_of(tensors[0], "allreduce")
    with transfer.explicit():
        home = adapter.device(adapter.tensor_device(tensors[0]))
        with adapter.on_device(home):
            total = tensors[0]
            for t in tensors[1:]:
                total = total + adapter.copy_if_needed(t, home)
        total = adapter.sum_across_processes(total)
        results = [total]
        for t in tensors[1:]:
            results.append(adapter.copy_to(total, adapter.device(adapter.tensor_device(t)), False))
        return results

"""Placing models: one device, split across devices, and data parallel.

The three patterns of the seeds, for torch `nn.Module`s, Gluon blocks and
Keras models (each framework's code is its backend package's `model.py`):

- one model on one device: `net = ds.place_model(net, ds.try_gpu())`;
- a model split over devices, with explicit copies at the seams:
  `ds.place_model(net, {"block1": gpu0, "block2": gpu1})` (Chainer's `F.copy`);
- data parallel: `ds.split_batch`, `ds.replicate`, `ds.allreduce`
  (D2L's multiple-GPUs chapter, Chainer's `ParallelUpdater`); `allreduce` also
  sums across processes when a torch.distributed process group runs.

Every copy these make goes through `devshim.transfer`, so a
`ds.transfer_guard("disallow")` block lets them all through. A device that runs out of
memory in `place_model`, `replicate` or `split_batch` raises `ds.DeviceOutOfMemoryError`.
"""

from __future__ import annotations

import contextlib
from typing import Mapping, Optional, Sequence, Union

from devshim import transfer
from devshim.backends import backend_for_tensor, get_backend, model_placement, specs
from devshim.backends.out_of_memory import raise_if_out_of_memory
from devshim.types import DeviceSpec, Model, NativeDevice, Tensor
from devshim.errors import (
    BatchSplitError, DeviceMismatchError, InvalidDeviceError, MixedFrameworksError, NotAModelError,
    NotATensorError, ReduceMismatchError, UnknownSubmoduleError,
)

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
                return get_backend(name), placement.for_model(net)
    can = [f"{spec.title} ({name})" for name, spec in specs().items() if spec.has_module("model")]
    raise NotAModelError(
        f"{type(net).__module__}.{type(net).__qualname__} is not a model devshim can place. It places "
        f"the models of {', '.join(can) or 'no backend'}: each framework's own model class "
        f"(docs/placement.md lists them), and Keras 3 models on the framework Keras runs on. To copy tensors, "
        f"use ds.to_device or ds.copy_if_needed."
    )


# ------------------------------------------------------------------ one device, or a map


def place_model(net: Model, device: Union[DeviceSpec, Mapping[str, DeviceSpec]], *,
                input_shape: Optional[tuple] = None) -> Model:
    """Put every parameter and buffer of `net` on `device`; always use the return value.

    `device` is a device spec (`ds.try_gpu()`, `"gpu:1"`), or, to split the
    model over devices, a mapping `{"submodule.name": device}` or
    `"balanced"` (top-level children spread over `ds.try_all_gpus()` by
    parameter bytes). A split model gets hooks that copy each placed block's
    inputs to its device before it runs (explicitly: gradients flow back
    across the copy, and the transfer guard allows it); `ds.unplace(net)`
    removes them.

    - torch: `module.to(device)`: non-persistent buffers move, tied weights stay tied.
    - Gluon: `initialize(ctx=device)` when uninitialised, else `reset_ctx` (gradients
      are re-zeroed).
    - Keras: an unbuilt model is built under the device (give `input_shape` when
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
        # Every name and device is checked before anything moves: a failed call leaves the model as
        # it was (the backend's place_map puts back what it moved if the framework fails midway).
        for name in device:
            if not isinstance(name, str):
                raise UnknownSubmoduleError(
                    f"A device map for place_model is keyed by submodule names (strings such as "
                    f"'0' or 'encoder.layer1'), not {name!r} ({type(name).__name__}). Write "
                    f"{{'{name}': device}} with the name as a string."
                )
        natives = {name: adapter.device(spec) for name, spec in device.items()}
        with transfer.explicit(), _named_out_of_memory(adapter, "place_model", list(natives.values()), model=net):
            return module.place_map(net, natives, adapter)
    native = adapter.device(device)
    # Out of memory midway, the backend puts back what it had moved (as place_map does): every
    # parameter stays where it was.
    with transfer.explicit(), _named_out_of_memory(adapter, "place_model", [native], model=net):
        return module.place(net, native, adapter, input_shape=input_shape)


@contextlib.contextmanager
def _named_out_of_memory(adapter, call: str, devices: list, value=None, model=None):
    """A framework's out-of-memory error inside the block as `DeviceOutOfMemoryError`."""
    try:
        yield
    except Exception as error:
        raise_if_out_of_memory(error, call, value, devices, model=model, adapters=(adapter,))
        raise


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


def unplace(net: Model) -> Model:
    """Remove the input-copying hooks a split `place_model` added; the parameters stay put.

    Example:
        >>> ds.unplace(net)
    """
    _, module = _model_module(net)
    module.unplace(net)
    return net


def model_devices(net: Model) -> set[NativeDevice]:
    """The set of devices `net`'s parameters and buffers live on, as the framework's own
    device objects (what `ds.device_of` returns for a tensor).

    Example:
        >>> ds.model_devices(net)
        {device(type='cpu')}
        >>> {str(ds.neutral_device(d)) for d in ds.model_devices(split_net)}
        {'gpu:0', 'gpu:1'}
    """
    adapter, module = _model_module(net)
    return {place.native for _, place in module.named_places(net, adapter)}


def model_device(net: Model) -> NativeDevice:
    """The one device all of `net`'s parameters and buffers share, as the framework's own
    device object: it goes into the framework's calls (`torch.ones(2, device=...)`,
    `x.to(...)`, TensorFlow's and MXNet's `with` blocks) as `ds.device_of(x)`'s does.
    `ds.neutral_device(ds.model_device(net))` is its `ds.Device` ("gpu:0").

    A model spread over devices raises `DeviceMismatchError` listing the
    parameter names on each; a model with no parameters yet (lazy layers, an
    unbuilt Keras model) raises `UnbuiltModelError` saying what to do.

    Example:
        >>> ds.model_device(ds.place_model(net, "cpu"))
        device(type='cpu')
        >>> X = torch.ones(2, 3).to(ds.model_device(net))
    """
    adapter, module = _model_module(net)
    by_place: dict = {}
    for name, place in module.named_places(net, adapter):
        by_place.setdefault(place, []).append(name)
    if len(by_place) == 1:
        return next(iter(by_place)).native
    listing = "; ".join(
        f"{place}: {', '.join(names[:6])}{' and %d more' % (len(names) - 6) if len(names) > 6 else ''}"
        for place, names in by_place.items()
    )
    raise DeviceMismatchError(
        f"This {type(net).__name__} is spread over {len(by_place)} devices ({listing}). Use "
        f"ds.model_devices(net) to get them all, or ds.place_model(net, device) to put it on one."
    )


# ------------------------------------------------------------------ data parallel


def split_batch(*tensors: Tensor, devices: Optional[Sequence[DeviceSpec]] = None) -> Union[list, tuple]:
    """Split each tensor along its first axis into one shard per device, each on its device.

    `split_batch(X, y, devices)` (D2L's call) returns `(X_shards, y_shards)`;
    with one tensor, its shard list. Uneven batches give the first shards one
    example more (9 rows over 4 devices: 3, 2, 2, 2), so no device idles;
    fewer examples than devices raises `BatchSplitError` (a `ValueError`)
    rather than hand some device an empty shard. `devices` is a list (a single
    spec such as `"cpu"` is refused with `InvalidDeviceError`); a 0-d tensor
    has no examples to split (`BatchSplitError`). Everything is checked before
    anything is copied. Shards already on their device are views, not copies.

    Example:
        >>> X_shards, y_shards = ds.split_batch(X, y, ds.try_all_gpus())
    """
    if devices is None:
        if not tensors:
            raise NotATensorError("split_batch needs tensors and devices: split_batch(X, y, ds.try_all_gpus()).")
        if len(tensors) < 2:
            raise InvalidDeviceError(
                "split_batch needs the devices to split over after the tensors: "
                "split_batch(X, y, ds.try_all_gpus()), or split_batch(X, devices=[...])."
            )
        tensors, devices = tensors[:-1], tensors[-1]
    if not tensors:
        raise NotATensorError("split_batch needs at least one tensor to split: split_batch(X, y, devices).")
    devices = _device_list(devices, "split_batch")
    adapters = [_adapter_of(x, "split_batch") for x in tensors]
    sizes = []
    for position, x in enumerate(tensors):
        shape = tuple(x.shape)
        if not shape:
            raise BatchSplitError(
                f"split_batch splits tensors along their first axis, and tensor {position} is 0-d (a "
                f"scalar): it has no examples to split. Give it a batch axis (shape (n, ...)), or copy "
                f"it whole to each device with ds.to_device."
            )
        sizes.append(int(shape[0]))
    if len(set(sizes)) != 1:
        raise BatchSplitError(
            f"split_batch splits examples, so every tensor needs the same first dimension; got "
            f"{sizes}. Pass tensors of one batch (X and its labels y)."
        )
    n = sizes[0]
    if n < len(devices):
        raise BatchSplitError(
            f"split_batch got {n} example{'s' if n != 1 else ''} for {len(devices)} devices: every device needs "
            f"at least one. Use a batch of {len(devices)} or more, or fewer devices (devices[:{n}])."
        )
    targets = [[adapter.device(d) for d in devices] for adapter in adapters]  # all checked first
    base, extra = divmod(n, len(devices))
    results = []
    with transfer.explicit():
        for x, adapter, natives in zip(tensors, adapters, targets):
            shards, start = [], 0
            for i, native in enumerate(natives):
                stop = start + base + (1 if i < extra else 0)
                shard = adapter.narrow(x, start, stop)
                with _named_out_of_memory(adapter, "split_batch", [native], shard):
                    shards.append(adapter.copy_if_needed(shard, native))
                start = stop
            results.append(shards)
    return results[0] if len(results) == 1 else tuple(results)


def _device_list(devices, function: str) -> list:
    """`devices` as a non-empty list, refusing a single spec or a tensor where a list belongs."""
    if isinstance(devices, (str, bytes)) or backend_for_tensor(devices) is not None:
        what = f"the single device spec {devices!r}" if isinstance(devices, (str, bytes)) else "a tensor"
        raise InvalidDeviceError(
            f"{function} takes a list of devices, and got {what}. Write {function}(..., [device]) "
            f"for one device, or {function}(..., ds.try_all_gpus()) for every GPU."
        )
    try:
        found = list(devices)
    except TypeError:
        raise InvalidDeviceError(
            f"{function} takes a list of devices, and got {devices!r} ({type(devices).__name__}), "
            f"which is not a list. Write {function}(..., [device]) for one device, or "
            f"{function}(..., ds.try_all_gpus()) for every GPU."
        ) from None
    if not found:
        raise InvalidDeviceError(
            f"{function} needs at least one device, and got an empty list. Pass ds.try_all_gpus() "
            f"(never empty: the CPU when there is no GPU), or a list such as ['gpu:0', 'gpu:1']."
        )
    return found


def _adapter_of(x, function: str):
    adapter = backend_for_tensor(x)
    if adapter is None:
        raise NotATensorError.for_value(x, function)
    return adapter


def replicate(net: Model, devices: Sequence[DeviceSpec]) -> list[Model]:
    """Independent copies of `net`, one on each device, with equal weights.

    Example:
        >>> replicas = ds.replicate(net, ds.try_all_gpus())
    """
    adapter, module = _model_module(net)
    natives = [adapter.device(d) for d in _device_list(devices, "replicate")]
    replicas: list = []
    with transfer.explicit():
        for native in natives:  # one device at a time: the one that runs out is the one named
            with _named_out_of_memory(adapter, "replicate", [native], model=net):
                replicas.extend(module.replicate(net, [native], adapter))
    return replicas


def allreduce(tensors: Sequence[Tensor]) -> list[Tensor]:
    """The sum of `tensors`, one result on each tensor's own device (D2L's allreduce).

    Everything is added on the first tensor's device, then copied to each
    device, explicitly; every result is its own tensor, a single tensor's too
    (and a `tf.Variable`'s: a tensor holding its value). The inputs are left as
    they are: assign the results back where needed (`p.grad = total`). The
    tensors must share one framework (`MixedFrameworksError`), one shape and one
    dtype (`ReduceMismatchError` lists them: a sum over devices never broadcasts).

    Hierarchical: when torch.distributed's default process group is initialised
    (`ds.init_distributed()`, or your own `init_process_group`) and the tensors
    are torch tensors, the local sum is also summed across every process of the
    job (`torch.distributed.all_reduce`) before it is handed out, so one call
    serves one process or many. That cross-process sum is not recorded by autograd.

    Example:
        >>> grads = ds.allreduce([p.grad for p in params_on_each_device])
    """
    tensors = _tensor_list(tensors)
    adapter = _one_framework(tensors)
    _check_alike(tensors)
    with transfer.explicit():
        home = adapter.device(adapter.tensor_device(tensors[0]))
        with adapter.on_device(home):
            total = tensors[0]
            for t in tensors[1:]:
                total = total + adapter.copy_if_needed(t, home)
        if total is tensors[0]:
            # One tensor: the sum is still a new tensor, never the input (an in-place update of the
            # result, a cross-process sum in place, or a JAX donation would change the caller's).
            total = adapter.copy_to(total, home, False)
        total = adapter.sum_across_processes(total)
        return [total] + [adapter.copy_to(total, adapter.device(adapter.tensor_device(t)), False)
                          for t in tensors[1:]]


def _tensor_list(tensors) -> list:
    if backend_for_tensor(tensors) is not None:
        raise NotATensorError(
            "allreduce takes a list of tensors, one per device, and got one tensor. Write "
            "ds.allreduce([g]) for a single tensor, or ds.allreduce([g0, g1, ...])."
        )
    if isinstance(tensors, (str, bytes, dict)):
        raise NotATensorError(
            f"allreduce takes a list of tensors, one per device, not a {type(tensors).__name__}. Write "
            f"ds.allreduce([g0, g1, ...])."
        )
    try:
        found = list(tensors)
    except TypeError:
        raise NotATensorError.for_value(tensors, "allreduce") from None
    if not found:
        raise NotATensorError(
            "allreduce needs at least one tensor to sum and got an empty list. Pass one tensor per "
            "device: ds.allreduce([p.grad for p in params_on_each_device])."
        )
    return found


def _one_framework(tensors: list):
    adapters = [_adapter_of(t, "allreduce") for t in tensors]
    names: dict = {}
    for position, adapter in enumerate(adapters):
        names.setdefault(adapter.name, []).append(position)
    if len(names) > 1:
        listing = "; ".join(f"{name}: tensor{'s' if len(at) > 1 else ''} {', '.join(map(str, at))}"
                            for name, at in names.items())
        first = next(iter(names))
        raise MixedFrameworksError(
            f"allreduce sums tensors of one framework, and got tensors of {len(names)} frameworks "
            f"({listing}). Convert them first, e.g. ds.convert(t, '{first}'), then call allreduce."
        )
    return adapters[0]


def _check_alike(tensors: list) -> None:
    described = [(tuple(t.shape), str(t.dtype)) for t in tensors]
    if all(d == described[0] for d in described[1:]):
        return
    kinds = {"shapes": {shape for shape, _ in described}, "dtypes": {dtype for _, dtype in described}}
    differs = [what for what, found in kinds.items() if len(found) > 1]
    listing = "; ".join(f"tensor {i}: shape {shape}, dtype {dtype}" for i, (shape, dtype) in enumerate(described))
    raise ReduceMismatchError(
        f"allreduce sums tensors of one shape and dtype, element by element (it never broadcasts), "
        f"and their {' and '.join(differs)} differ: {listing}. Pass the same tensor from each device "
        f"(each replica's gradient of one parameter)."
    )

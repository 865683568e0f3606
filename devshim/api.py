"""The public functions: a thin layer over the backends.

Functions that take tensors dispatch on each tensor's own framework, whatever
backend is selected; functions without a tensor use the selected backend, or
the one named by `backend=`.

`device_of`, `to_device` and `copy_if_needed` are the hot paths. For a
single tensor each is one dict lookup on the tensor's type, which finds its
`FastPaths` record (`devshim.backends.dispatch`), then that record's fast
path, which keeps the resolved target device of each spec until settings
change. Nests go down to `devshim.backends.nests`. Every data movement goes
through `devshim.transfer`.
"""

from __future__ import annotations

from typing import Collection, Hashable, Union

from devshim import _tree, transfer
from devshim.backends.dispatch import (
    ANSWERED_BY_ATTRIBUTE, FAST_PATHS, compile_constants, compile_entry_points, fast_paths,
)
from devshim.backends.nests import copy_nest, copy_nest_if_needed, nest_to_numpy
from devshim.backends.registry import describe_native_device
from devshim.backends.selection import get_backend
from devshim._device import Device
from devshim.errors import DeviceMismatchError, MultiDeviceValueError, NotATensorError
from devshim.types import DeviceSpec, NativeDevice, Nest, Tensor

__all__ = [
    "cpu", "gpu", "num_gpus", "try_gpu", "try_all_gpus", "devices", "device",
    "device_of", "neutral_device", "to_device", "copy_if_needed", "same_device", "ensure_same_device",
    "to_numpy",
]

# ------------------------------------------------------------------ devices


def cpu(*, backend: str | None = None) -> NativeDevice:
    """The CPU as the backend's native device.

    Example:
        >>> torch.ones(2, device=ds.cpu()).device
        device(type='cpu')
    """
    return get_backend(backend).cpu()


def gpu(i: int | None = None, *, backend: str | None = None) -> NativeDevice:
    """GPU `i` as the backend's native device; DeviceUnavailableError if absent.

    Without `i`: this process's GPU, which is GPU 0 except under a launcher
    that started several processes (torchrun, Slurm, Open MPI, Horovod), where
    it is GPU `local_rank % num_gpus()` (docs/distributed.md).

    Example:
        >>> ds.gpu(0)  # on a machine with one CUDA GPU
        device(type='cuda', index=0)
        >>> ds.gpu()   # torchrun's process with LOCAL_RANK=1 on a machine with two
        device(type='cuda', index=1)
    """
    return get_backend(backend).gpu(i)


def num_gpus(*, backend: str | None = None) -> int:
    """How many GPUs the backend sees (0 under `DEVSHIM_DEVICE=cpu`), under a launcher too.

    Example:
        >>> ds.num_gpus()
        0
    """
    return get_backend(backend).num_gpus()


def try_gpu(i: int | None = None, *, backend: str | None = None) -> NativeDevice:
    """GPU `i` if it exists, else the CPU.

    Without `i`: this process's GPU if there is one, else the CPU. That is GPU 0,
    except under a launcher that started several processes (torchrun, Slurm,
    Open MPI, Horovod), where each process gets GPU `local_rank % num_gpus()`
    (docs/distributed.md). `try_gpu(0)` always means GPU 0.

    Example:
        >>> X = torch.ones(2, 3, device=ds.try_gpu())
    """
    return get_backend(backend).try_gpu(i)


def try_all_gpus(*, backend: str | None = None) -> list[NativeDevice]:
    """Every GPU, or `[cpu()]` when there is none (never an empty list).

    Under a launcher that started several processes: `[try_gpu()]`, this
    process's GPU, since each process of the job drives its own.

    Example:
        >>> ds.try_all_gpus()  # no GPU
        [device(type='cpu')]
    """
    return get_backend(backend).try_all_gpus()


def devices(*, backend: str | None = None) -> list[NativeDevice]:
    """The CPU followed by every GPU, as native devices.

    Example:
        >>> ds.devices()
        [device(type='cpu'), device(type='cuda', index=0)]
    """
    return get_backend(backend).devices()


def device(spec: DeviceSpec, *, backend: str | None = None) -> NativeDevice:
    """The backend's native device for a spec: `"cpu"`, `"gpu:1"`, `"cuda:1"`,
    `"mps"`, `"meta"`, a native device object, or a `ds.Device`.

    Example:
        >>> ds.device("cpu")
        device(type='cpu')
    """
    return get_backend(backend).device(spec)


# ------------------------------------------------------------------ tensors


def device_of(x: Tensor) -> NativeDevice:
    """The device tensor `x` lives on, as its framework's own device object.

    What comes back goes straight into the framework's `device=` (and into the
    namespace `ds.array_module(x)` returns): a `torch.device`, a `jax.Device`,
    a TensorFlow device name, an `mx.Context`, NumPy's `"cpu"`. It compares
    equal to the `ds.Device` naming the same place; `ds.neutral_device(x)` is
    that `ds.Device`, for questions across frameworks. Inside `jax.jit` an
    array has no device yet, and the answer is None (as array-api-compat's).

    Example:
        >>> ds.device_of(torch.ones(2))
        device(type='cpu')
        >>> torch.zeros(3, device=ds.device_of(X)).device == X.device
        True
    """
    # torch's and NumPy's `x.device` is the answer itself; most other frameworks' tensors say
    # where they are in an attribute: one subscript more, no call.
    if type(x) in ANSWERED_BY_ATTRIBUTE:
        return x.device
    try:
        paths = FAST_PATHS[type(x)]
    except KeyError:  # a type not seen yet, or no tensor
        paths = _learned(x, "device_of")
    if paths.native_is_attribute:  # learned just now
        return x.device
    table = paths.table
    if table is not None:
        try:
            return table.natives[getattr(x, table.attr)]
        except (KeyError, TypeError, AttributeError):  # a device not met yet, and the like
            pass
    return paths.device_of(x)


def neutral_device(x: Union[Tensor, NativeDevice]) -> Device:
    """The framework-neutral `ds.Device` tensor `x` lives on, or that a framework's device
    object `x` names (what `ds.device_of`, `ds.try_gpu` or `ds.model_device` return).

    `kind`, `index`, `virtual` and `platform` say the same for every
    framework, and Devices of different frameworks compare and hash alike when
    they name the same place (a torch tensor and a NumPy array on the host).

    Example:
        >>> d = ds.neutral_device(torch.ones(2))
        >>> str(d), d == ds.neutral_device(np.ones(2)), d == ds.device_of(torch.ones(2))
        ('cpu:0', True, True)
        >>> str(ds.neutral_device(ds.model_device(net)))
        'gpu:0'
    """
    try:
        paths = FAST_PATHS[type(x)]
    except KeyError:  # a type not seen yet, a device object, or no tensor
        described = _described_device(x)
        if described is not None:
            return described
        paths = _learned(x, "neutral_device")
    table = paths.table
    if table is not None:  # one lookup, no call into the backend
        try:
            return table[getattr(x, table.attr)]
        except (KeyError, TypeError, AttributeError):  # a device not described yet, and the like
            pass
    return paths.neutral_device(x)


def to_device(x: Nest, device: DeviceSpec, *, non_blocking: bool = False,
              skip_keys: Union[Hashable, Collection[Hashable], None] = None) -> Nest:
    """Copy `x` (a tensor or a nest of them) to `device`: always new storage.

    Even when `x` already lives on `device` the result is a copy, so
    mutating it never changes `x`. Gradients flow back through the copy.
    `non_blocking=True` lets torch overlap host-to-GPU copies from pinned
    memory; synchronise before reading a result copied asynchronously to the
    host. In nests, `skip_keys` (a key or a collection of keys) names mapping
    entries left as they are, at any depth; objects with a `.to(device)`
    method get it called. A device that runs out of memory raises
    `ds.DeviceOutOfMemoryError` (a `MemoryError`; the framework's error is its cause).

    Example:
        >>> Z = ds.to_device(X, ds.try_gpu(1))
        >>> batch = ds.to_device({"x": X, "y": Y, "ids": I}, "gpu", skip_keys="ids")
    """
    try:
        copy_one = FAST_PATHS[type(x)].copy  # (then a call: `paths.copy(...)` is a slower method lookup)
    except KeyError:  # a nest, or a tensor class met for the first time: the nest layer learns it
        return copy_nest(x, device, non_blocking, "to_device", skip_keys)
    return copy_one(x, device, non_blocking)  # (out of memory: named there, where the tensor's adapter is held)


def copy_if_needed(x: Nest, device: DeviceSpec, *, non_blocking: bool = False,
                   skip_keys: Union[Hashable, Collection[Hashable], None] = None) -> Nest:
    """`x` itself when it already lives on `device`, else `to_device(x, device)`.

    For nests, only the tensors that are elsewhere are copied, and a container
    in which nothing had to be copied comes back as itself. `non_blocking`
    and `skip_keys` as for `to_device`.

    Example:
        >>> Z2 = ds.copy_if_needed(Z, ds.try_gpu(1))
        >>> Z2 is Z   # Z was already there
        True
    """
    try:
        paths = FAST_PATHS[type(x)]
    except KeyError:  # a nest, or a tensor class met for the first time: the nest layer learns it
        return copy_nest_if_needed(x, device, "copy_if_needed", skip_keys, non_blocking)
    # Where a tensor's Device says it all (torch, NumPy): "already there" is two lookups and an `is`.
    targets = paths.targets
    if targets is not None:
        home = paths.home  # NumPy's: every array is on the host (no read of x.device at all)
        try:
            if (home if home is not None else paths.exact[x.device]) is targets[device]:
                return x
        except (KeyError, TypeError):  # a spec or a device not resolved yet: the backend decides
            pass
    copy_one = paths.copy_if_needed
    return copy_one(x, device, True) if non_blocking else copy_one(x, device)


def _described_device(x):
    """The `ds.Device` of a framework's device object or of a `ds.Device`; None for anything
    else: a tensor of a class not met yet, a spec string (`ds.device(spec)` resolves one), or no
    device at all."""
    if isinstance(x, Device):
        return x
    if isinstance(x, str) and type(x) is not str:  # a TensorFlow device is a str subclass
        return describe_native_device(x)
    if isinstance(x, (str, bytes, int, float)) or fast_paths(x) is not None:  # specs and tensors are no device objects
        return None
    return describe_native_device(x)


def _learned(x, function: str):
    """The `FastPaths` of `x`'s class, learned now; `NotATensorError` naming `function`
    for a value that is no tensor."""
    paths = fast_paths(x)
    if paths is None:
        raise NotATensorError.for_value(x, function)
    return paths


def to_numpy(x: Nest) -> Nest:
    """Copy `x` (or every tensor in a nest) to a host NumPy array.

    The result never shares memory with `x`.

    Example:
        >>> ds.to_numpy(torch.ones(2, device=ds.try_gpu()))
        array([1., 1.], dtype=float32)
    """
    try:
        adapter = FAST_PATHS[type(x)].adapter
    except KeyError:  # a nest, or a tensor class met for the first time: the nest layer learns it
        return nest_to_numpy(x, "to_numpy")
    return transfer.to_host(adapter, x)


def _tensor_devices(xs: tuple) -> list:
    found = []
    for position, x in enumerate(xs):
        for path, leaf in _tree.iter_leaves(x):
            paths = fast_paths(leaf)
            if paths is not None:
                try:
                    place = paths.neutral_device(leaf)
                except MultiDeviceValueError:  # a JAX array spread over devices: its Sharding
                    place = paths.device_of(leaf)
                found.append((f"argument {position}{path}", place))
    return found


def same_device(*xs: Nest) -> bool:
    """Whether every tensor in `xs` (nests walked) lives on one device.

    Non-tensor leaves are ignored; with no tensors at all the answer is True.
    JAX arrays spread over several devices are placed alike when their
    shardings are equal (never alike with a single-device array).

    Example:
        >>> ds.same_device(X, {"y": Y})
        True
    """
    placed = _tensor_devices(xs)
    return all(dev == placed[0][1] for _, dev in placed[1:])


def ensure_same_device(*xs: Nest) -> NativeDevice:
    """The one device all tensors in `xs` share, as the first tensor's framework's own device
    object (what `ds.device_of` returns); DeviceMismatchError otherwise.

    For JAX arrays spread alike over several devices: their `Sharding`.

    Example:
        >>> dev = ds.ensure_same_device(X, Y)
        >>> Z = torch.zeros(2, device=dev)
    """
    placed = _tensor_devices(xs)
    if not placed:
        raise NotATensorError(
            "ensure_same_device() found no tensor in its arguments; pass at least one tensor."
        )
    first = placed[0][1]
    if all(dev == first for _, dev in placed[1:]):
        return first.native if type(first) is Device else first
    listing = "; ".join(f"{where} is on {dev!r}" for where, dev in placed)
    strays = [where for where, dev in placed if dev != first]
    # A Sharding (JAX arrays spread over devices) has no spec string: name the tensor that has it.
    there = f"ds.device('{first}')" if type(first) is Device else f"ds.device_of(<{placed[0][0]}>)"
    raise DeviceMismatchError(
        f"Tensors are on different devices: {listing}. Copy explicitly before combining "
        f"them, e.g. ds.copy_if_needed(<{strays[0]}>, {there}) copies "
        f"{strays[0]} to {first}."
    )


# Inside torch.compile, on every torch: the functions that take no tensor run in plain Python and
# what they return is kept. Those that take tensors: on a torch older than 2.13, whose Dynamo
# cannot trace devshim's dispatch, Dynamo traces the torch backend's traced version of each
# (or refuses it by name, TorchCompileReleaseError, where there is none).
compile_constants(cpu, gpu, num_gpus, try_gpu, try_all_gpus, devices, device)
compile_entry_points(device_of, neutral_device, to_device, copy_if_needed, same_device, ensure_same_device, to_numpy)

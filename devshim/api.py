"""The public functions. Each one is a thin layer over the adapters.

Functions that take tensors dispatch on each tensor's own framework, whatever
backend is selected; functions without a tensor use the selected backend, or
the one named by ``backend=``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from devshim import _tree
from devshim.backends import Backend, backend_for_tensor, get_backend
from devshim.device import Device
from devshim.errors import DeviceMismatchError, NotATensorError

__all__ = [
    "cpu", "gpu", "num_gpus", "try_gpu", "try_all_gpus", "devices", "device",
    "device_of", "to_device", "copy_if_needed", "same_device", "ensure_same_device",
    "to_numpy",
]

# ------------------------------------------------------------------ devices


def cpu(*, backend: Optional[str] = None) -> Any:
    """The CPU as the backend's native device.

    Example:
        >>> torch.ones(2, device=ds.cpu()).device
        device(type='cpu')
    """
    return get_backend(backend).cpu()


def gpu(i: int = 0, *, backend: Optional[str] = None) -> Any:
    """GPU ``i`` as the backend's native device; DeviceUnavailableError if absent.

    Example:
        >>> ds.gpu(0)  # on a machine with one CUDA GPU
        device(type='cuda', index=0)
    """
    return get_backend(backend).gpu(i)


def num_gpus(*, backend: Optional[str] = None) -> int:
    """How many GPUs the backend sees (0 under ``DEVSHIM_DEVICE=cpu``).

    Example:
        >>> ds.num_gpus()
        0
    """
    return get_backend(backend).num_gpus()


def try_gpu(i: int = 0, *, backend: Optional[str] = None) -> Any:
    """GPU ``i`` if it exists, else the CPU.

    Example:
        >>> X = torch.ones(2, 3, device=ds.try_gpu())
    """
    return get_backend(backend).try_gpu(i)


def try_all_gpus(*, backend: Optional[str] = None) -> List[Any]:
    """Every GPU, or ``[cpu()]`` when there is none (never an empty list).

    Example:
        >>> ds.try_all_gpus()  # no GPU
        [device(type='cpu')]
    """
    return get_backend(backend).try_all_gpus()


def devices(*, backend: Optional[str] = None) -> List[Any]:
    """The CPU followed by every GPU, as native devices.

    Example:
        >>> ds.devices()
        [device(type='cpu'), device(type='cuda', index=0)]
    """
    return get_backend(backend).devices()


def device(spec: Any, *, backend: Optional[str] = None) -> Any:
    """The backend's native device for a spec: ``"cpu"``, ``"gpu:1"``, ``"cuda:1"``,
    ``"mps"``, a native device object, or a ``ds.Device``.

    Example:
        >>> ds.device("cpu")
        device(type='cpu')
    """
    return get_backend(backend).device(spec)


# ------------------------------------------------------------------ tensors


def _not_a_tensor(x: Any, function: str) -> NotATensorError:
    return NotATensorError(
        f"{function}() expects a tensor of an installed framework (torch.Tensor, "
        f"numpy.ndarray, ...) or a dict/list/tuple/dataclass of them, but got "
        f"{type(x).__module__}.{type(x).__qualname__}. Convert it to a tensor first, "
        f"e.g. torch.as_tensor(x) or numpy.asarray(x)."
    )


def device_of(x: Any) -> Device:
    """The ``ds.Device`` a tensor lives on.

    Example:
        >>> str(ds.device_of(torch.ones(2)))
        'cpu:0'
    """
    adapter = backend_for_tensor(x)
    if adapter is None:
        raise _not_a_tensor(x, "device_of")
    return adapter.tensor_device(x)


class _TargetCache:
    """Resolves one device spec to each framework's native device at most once."""

    __slots__ = ("spec", "natives")

    def __init__(self, spec: Any) -> None:
        self.spec = spec
        self.natives: Dict[str, Any] = {}

    def native_for(self, adapter: Backend) -> Any:
        native = self.natives.get(adapter.name)
        if native is None:
            native = adapter.device(self.spec)
            self.natives[adapter.name] = native
        return native


def _map_nest(x: Any, function: str, leaf_fn) -> Any:
    """Apply ``leaf_fn(adapter, tensor)`` to every tensor in the nest ``x``."""
    if not _tree.is_container(x):
        raise _not_a_tensor(x, function)

    def visit(leaf: Any) -> Any:
        adapter = backend_for_tensor(leaf)
        return leaf if adapter is None else leaf_fn(adapter, leaf)

    return _tree.map_leaves(visit, x)


def to_device(x: Any, device: Any, *, non_blocking: bool = False) -> Any:
    """Copy ``x`` (a tensor or a nest of them) to ``device``: always new storage.

    Even when ``x`` already lives on ``device`` the result is a copy, so
    mutating it never changes ``x``. Gradients flow back through the copy.
    ``non_blocking=True`` lets torch overlap host-to-GPU copies; synchronise
    before reading a result copied asynchronously to the host.

    Example:
        >>> Z = ds.to_device(X, ds.try_gpu(1))
        >>> batch = ds.to_device({"x": X, "y": Y}, "gpu")
    """
    adapter = backend_for_tensor(x)
    if adapter is not None:
        return adapter.copy_to(x, adapter.device(device), non_blocking)
    target = _TargetCache(device)
    return _map_nest(
        x, "to_device",
        lambda adapter, leaf: adapter.copy_to(leaf, target.native_for(adapter), non_blocking),
    )


def copy_if_needed(x: Any, device: Any) -> Any:
    """``x`` itself when it already lives on ``device``, else ``to_device(x, device)``.

    For containers, the same container comes back when no leaf had to move.

    Example:
        >>> Z2 = ds.copy_if_needed(Z, ds.try_gpu(1))
        >>> Z2 is Z   # Z was already there
        True
    """
    adapter = backend_for_tensor(x)
    if adapter is not None:
        return adapter.move_if_needed(x, adapter.device(device))
    target = _TargetCache(device)
    moved = False

    def leaf_fn(adapter: Backend, leaf: Any) -> Any:
        nonlocal moved
        result = adapter.move_if_needed(leaf, target.native_for(adapter))
        moved = moved or result is not leaf
        return result

    result = _map_nest(x, "copy_if_needed", leaf_fn)
    return result if moved else x


def to_numpy(x: Any) -> Any:
    """Copy ``x`` (or every tensor in a nest) to a host NumPy array.

    The result never shares memory with ``x``.

    Example:
        >>> ds.to_numpy(torch.ones(2, device=ds.try_gpu()))
        array([1., 1.], dtype=float32)
    """
    adapter = backend_for_tensor(x)
    if adapter is not None:
        return adapter.tensor_to_numpy(x)
    return _map_nest(x, "to_numpy", lambda adapter, leaf: adapter.tensor_to_numpy(leaf))


def _tensor_devices(xs: Tuple[Any, ...]) -> List[Tuple[str, Device]]:
    found = []
    for position, x in enumerate(xs):
        for path, leaf in _tree.iter_leaves(x):
            adapter = backend_for_tensor(leaf)
            if adapter is not None:
                found.append((f"argument {position}{path}", adapter.tensor_device(leaf)))
    return found


def same_device(*xs: Any) -> bool:
    """Whether every tensor in ``xs`` (nests walked) lives on one device.

    Non-tensor leaves are ignored; with no tensors at all the answer is True.

    Example:
        >>> ds.same_device(X, {"y": Y})
        True
    """
    placed = _tensor_devices(xs)
    return all(dev == placed[0][1] for _, dev in placed[1:])


def ensure_same_device(*xs: Any) -> Device:
    """The one Device all tensors in ``xs`` share; DeviceMismatchError otherwise.

    Example:
        >>> dev = ds.ensure_same_device(X, Y)
    """
    placed = _tensor_devices(xs)
    if not placed:
        raise NotATensorError(
            "ensure_same_device() found no tensor in its arguments; pass at least one tensor."
        )
    first = placed[0][1]
    if all(dev == first for _, dev in placed[1:]):
        return first
    listing = "; ".join(f"{where} is on {dev!r}" for where, dev in placed)
    strays = [where for where, dev in placed if dev != first]
    raise DeviceMismatchError(
        f"Tensors are on different devices: {listing}. Copy explicitly before combining "
        f"them, e.g. ds.copy_if_needed(<{strays[0]}>, ds.device('{first}')) moves "
        f"{strays[0]} to {first}."
    )


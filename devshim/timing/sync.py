"""`synchronize`, and the plan of waits that `Timer` and `benchmark` follow."""

from __future__ import annotations

from devshim import _tree
from devshim.backends import backend_for_tensor, describe_native_device, get_backend, load_backend
from devshim._device import ACCEPTED_SPECS, Device
from devshim.errors import InvalidDeviceError

__all__ = ["synchronize", "waits", "Waiter"]

# Leaves that are never tensors or devices' objects; skipping the lookups for them is cheaper.
_PLAIN = (int, float, complex, bool, type(None), bytes)


def synchronize(device=None, *, backend=None) -> None:
    """Wait until the work queued on `device` has finished.

    `device` may be None (every device of the selected backend, or of
    `backend=`), a spec such as `"gpu:1"`, a native device, a
    `ds.Device`, a tensor, or a nest of tensors; for tensors it waits for
    the devices they live on, or for the values themselves on backends that
    wait per value. Host-only backends return at once, and so does a
    framework that is not imported yet, since it cannot have queued anything.

    Example:
        >>> y = x @ x                 # queued on the GPU, not done
        >>> ds.synchronize(y)         # now it is
        >>> ds.synchronize("gpu:0")   # or wait for a whole device
    """
    if device is None:
        adapter = get_backend(backend)
        if adapter.is_loaded():
            adapter.synchronize(None)
        return
    for wait in waits(device, backend):
        wait()


def waits(target, backend=None, outputs_only: bool = False) -> list:
    """One callable per distinct device (or per-value wait) that `target` refers to.

    A lone non-tensor must be a device. In a nest, tensors and devices count
    and other leaves (numbers, None) are skipped; with `outputs_only` (what
    `benchmark` waits on) only tensors count.

    Example:
        >>> for wait in waits({"y": y, "z": z}):
        ...     wait()
    """
    nested = _tree.is_container(target)
    leaves = [leaf for _, leaf in _tree.iter_leaves(target)] if nested else [target]
    pairs = [_wait_for_leaf(leaf, backend, devices=not outputs_only, strict=not nested) for leaf in leaves]
    return _one_per_device([pair for pair in pairs if pair is not None])


def _one_per_device(pairs: list) -> list:
    """The waits of `(key, wait)` pairs: one per device (key), and every per-value wait (key None)."""
    seen = set()
    found = []
    for key, wait in pairs:
        if key is None or key not in seen:
            seen.add(key)
            found.append(wait)
    return found


def _wait_for_leaf(leaf, backend, devices: bool, strict: bool):
    adapter = None if isinstance(leaf, (str, Device) + _PLAIN) else backend_for_tensor(leaf)
    if adapter is not None:
        if adapter.waits_per_value:
            return None, lambda: adapter.wait(leaf)
        where = adapter.tensor_device(leaf)
        return device_wait(adapter, where, where.native)
    if not devices:
        return None
    if isinstance(leaf, Device):
        adapter = load_backend(leaf.backend) if leaf.backend else get_backend(backend)
        native = leaf.native if leaf.backend == adapter.name else adapter.device(leaf)
        return device_wait(adapter, leaf, native)
    if type(leaf) is str:  # a spec; str subclasses are native devices, described below
        adapter = get_backend(backend)
        native = adapter.device(leaf)
        return device_wait(adapter, adapter.describe(native), native)
    described = None if isinstance(leaf, _PLAIN) else describe_native_device(leaf)
    if described is not None and described.backend:
        return device_wait(load_backend(described.backend), described, leaf)
    if strict:
        raise InvalidDeviceError(
            f"synchronize() cannot wait on {type(leaf).__module__}.{type(leaf).__qualname__}: "
            f"pass None (every device), a tensor or a nest of tensors, or a device: "
            f"{ACCEPTED_SPECS}."
        )
    return None


def device_wait(adapter, where: Device, native) -> tuple:
    """(a key naming the device, a call that waits for it): the key lets callers wait once per device."""
    return (adapter.name, str(where), where.virtual), lambda: adapter.synchronize(native)


class Waiter:
    """What `benchmark` calls at the end of each block.

    Which devices to wait for is worked out once, from the first outputs
    (and `device`); later blocks only call those waits, plus the per-value
    waits of backends that wait per value. Code run inside the timed region
    is not free: right after a big kernel the interpreter's own code is out
    of cache, so the less of it, the better.

    Example:
        >>> wait = Waiter(device=None, backend=None)
        >>> wait(outputs)
    """

    def __init__(self, device, backend) -> None:
        self.device, self.backend = device, backend
        self.device_waits = waits(device, backend) if device is not None else []
        self.plan = None
        self.per_value = False

    def _make_plan(self, outputs) -> list:
        # The outputs' devices; per-value waits (key None) are made anew for each block's outputs.
        pairs = [_wait_for_leaf(leaf, None, devices=False, strict=False) for _, leaf in _tree.iter_leaves(outputs)]
        pairs = [pair for pair in pairs if pair is not None]
        self.per_value = any(key is None for key, _ in pairs)
        plan = _one_per_device([pair for pair in pairs if pair[0] is not None]) + self.device_waits
        if not plan and not self.per_value:
            backend = self.backend
            plan.append(lambda: synchronize(None, backend=backend))
        self.plan = plan
        return plan

    def __call__(self, outputs) -> None:
        plan = self.plan if self.plan is not None else self._make_plan(outputs)
        for wait in plan:
            wait()
        if self.per_value:
            for _, leaf in _tree.iter_leaves(outputs):
                adapter = None if isinstance(leaf, _PLAIN) else backend_for_tensor(leaf)
                if adapter is not None and adapter.waits_per_value:
                    adapter.wait(leaf)

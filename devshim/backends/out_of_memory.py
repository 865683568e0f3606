"""The named error for a device that runs out of memory in one of devshim's own calls.

`ds.to_device`, `ds.copy_if_needed`, `ds.place_model`, `ds.replicate`,
`ds.split_batch` and `ds.convert` let a framework's out-of-memory error through as
`DeviceOutOfMemoryError` (a `MemoryError`), the framework's error as its `__cause__`.
Each backend's `memory.py` says which of its framework's errors mean "out of memory"
(`DeviceMemory.is_out_of_memory`); the message names the device, the bytes asked for and
the bytes free there (`ds.memory`), and says what to do. Any other error passes as it is.

Nothing here runs unless a call failed: the calls catch the error, then ask.

Example:
    >>> try:
    ...     copy(x, device)
    ... except Exception as error:
    ...     raise_if_out_of_memory(error, "to_device", x, [device])
    ...     raise
"""

from __future__ import annotations

from devshim import _tree, settings
from devshim.backends import registry
from devshim.backends.dispatch import backend_for_tensor
from devshim.backends.memory_base import format_bytes
from devshim.errors import DeviceOutOfMemoryError

__all__ = ["raise_if_out_of_memory", "out_of_memory_error", "framework_of"]


def framework_of(error: BaseException, first=()):
    """`(adapter, DeviceMemory)` of the loaded framework whose out-of-memory error `error`
    is (asking the adapters in `first` before the others), or None when it is no such error.

    Example:
        >>> framework_of(torch.OutOfMemoryError("CUDA out of memory"))[0].name
        'torch'
    """
    if isinstance(error, DeviceOutOfMemoryError):
        return None  # already named (a call inside another devshim call)
    for adapter in (*first, *registry.loaded_adapters()):
        contract = registry.memory(adapter.name)
        if contract is not None and contract.is_out_of_memory(error):
            return adapter, contract
    return None


def raise_if_out_of_memory(error: BaseException, call: str, value=None, devices=(), *,
                           model=None) -> None:
    """Raise `DeviceOutOfMemoryError` from `error` when it is a framework's out-of-memory
    error met in devshim's `call` (copying `value`, a tensor or a nest, or placing
    `model`, to `devices`: specs or native devices); return otherwise, and the caller
    re-raises `error` as it is.

    Example:
        >>> raise_if_out_of_memory(torch.OutOfMemoryError("..."), "to_device", x, ["gpu:0"])
        Traceback (most recent call last):
        devshim.errors.DeviceOutOfMemoryError: ds.to_device ran out of memory on gpu:0 ...
    """
    found = framework_of(error, _owners(value if model is None else model))
    if found is not None:  # raised, not kept in a variable (see the note below)
        raise _named(error, found, call, value, devices, model) from error
    # A frame holding its own exception keeps every tensor of the frames below it alive (the
    # traceback holds them) until the garbage collector runs: a search for the largest batch
    # would find the last refused batch's tensors still in use.


def out_of_memory_error(error: BaseException, call: str, value=None, devices=(), *, model=None):
    """The `DeviceOutOfMemoryError` `raise_if_out_of_memory` raises, or None.

    Example:
        >>> out_of_memory_error(ValueError("no"), "to_device") is None
        True
    """
    found = framework_of(error, _owners(value if model is None else model))
    return None if found is None else _named(error, found, call, value, devices, model)


def _named(error: BaseException, found: tuple, call: str, value, devices, model) -> DeviceOutOfMemoryError:
    adapter, contract = found
    asked, what = _safely(lambda: _asked(contract, value, model)) or (None, "")
    places = _places(adapter, contract, devices)
    device, free = _fullest(places, asked)
    where = str(device) if device is not None else "a device"
    others = ""
    if len(places) > 1:
        others = " (free on each: " + ", ".join(f"{d} {format_bytes(f)}" for d, f in places) + ")"
    said = (str(error).strip().splitlines() or [""])[0]
    said = said if len(said) <= 200 else said[:200].rsplit(" ", 1)[0] + " ..."
    facts = "; ".join([f"it asked for {format_bytes(asked)}{what}" if asked is not None else
                       "how many bytes it asked for is unknown",
                       f"{format_bytes(free)} free there" if free is not None else "the bytes free there are unknown"])
    message = (
        f"ds.{call} ran out of memory on {where} ({facts}{others}). {adapter.spec.title} said: "
        f"{type(error).__name__}: {said} What to do: use a smaller batch, put the work on another device "
        f"(ds.try_all_gpus() lists them), or free memory there: drop the tensors you no longer need (del, "
        f"then let them go out of scope){_hint(contract, device)}. ds.memory({where!r}) shows what is in use."
    )
    return DeviceOutOfMemoryError(message, device=device, requested=asked, free=free, call=f"ds.{call}")


def _owners(value) -> list:
    """The adapters of the tensors in `value` (a tensor, a nest, a model), first met first."""
    owners: dict = {}
    owner = backend_for_tensor(value)
    if owner is not None:
        return [owner]
    try:
        for _, leaf in _tree.iter_leaves(value):
            owner = backend_for_tensor(leaf)
            if owner is not None:
                owners.setdefault(owner.name, owner)
    except Exception:  # noqa: BLE001 - a model devshim cannot walk: ask every framework
        pass
    return list(owners.values())


def _asked(contract, value, model) -> tuple:
    """(bytes asked for or None, the words saying what they are)."""
    if model is not None:
        size = _safely(lambda: contract.model_bytes(model))
        return size, " (the model's parameters and buffers)"
    total, count = 0, 0
    for _, leaf in _tree.iter_leaves(value):
        owner = backend_for_tensor(leaf)  # any framework's: ds.convert's source is another's
        own = registry.memory(owner.name) if owner is not None else None
        if own is None:
            continue
        size = _safely(lambda leaf=leaf, own=own: own.nbytes(leaf))
        if size is None:
            return None, ""
        total, count = total + size, count + 1
    if not count:
        return None, ""
    return total, f" ({count} tensors)" if count > 1 else ""


def _places(adapter, contract, devices) -> list:
    """(ds.Device, free bytes or None) of each device the call was copying to."""
    found = []
    for spec in devices:
        native = _safely(lambda spec=spec: adapter.target(spec))
        if native is None:
            continue
        device = adapter.describe(native)
        info = _safely(lambda native=native: contract.figures(adapter, native))
        found.append((device, None if info is None else info.free))
    return found


def _fullest(places: list, asked) -> tuple:
    """The device that ran out: the one device, else the first with less free than asked for."""
    if not places:
        return None, None
    for device, free in places:
        if free is not None and asked is not None and free < asked:
            return device, free
    return places[0]


def _hint(contract, device) -> str:
    """What else frees memory: the framework's pool, or a virtual GPU's size."""
    if device is None or not device.virtual:
        return f", {contract.free_hint}" if contract.free_hint else ""
    size = _safely(settings.virtual_memory)
    if size is None:
        return ""
    return f", or give the virtual GPUs more memory ({settings.VIRTUAL_MEMORY_VAR} is {format_bytes(size)})"


def _safely(read):
    """`read()`, or None when the framework cannot answer now (it is out of memory)."""
    try:
        return read()
    except Exception:  # noqa: BLE001 - the figures are extras of a message about another error
        return None

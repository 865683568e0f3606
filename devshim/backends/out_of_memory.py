"""The named error for a device that runs out of memory in one of devshim's own calls.

`ds.to_device`, `ds.copy_if_needed`, `ds.place_model`, `ds.replicate`,
`ds.split_batch` and `ds.convert` let a framework's out-of-memory error through as
`DeviceOutOfMemoryError` (a `MemoryError`), the framework's error as its `__cause__`.
Each backend's `memory.py` says which of its framework's errors mean "out of memory"
(`DeviceMemory.is_out_of_memory`). The failing step names the error itself, with the adapters
it holds: a lone tensor's fast path (`Backend.copy_fn`), the nest walk (`nests`, the adapters it
had met), `ds.convert`'s leaf (its two frameworks), the model's placement. It sits below the
device contract (`base`), which calls it, and asks a framework's memory contract through the
adapter's registry (`Backend.peers`).

The message names the device that ran out (the one device of the call; of several, the one
the framework's error names, else the first with less free than asked), the bytes asked for,
and the bytes free there before the call: the failed call's frames are cleared first, so
its half-made copies are gone when the free bytes are read (they would otherwise stay alive
with the traceback, and a search for the largest batch would find them still in use). It says
what to do: for a batch, a smaller one; for a model, a smaller model, more memory or a device
map. Any other error passes as it is. Nothing here runs unless a call failed.

Example:
    >>> try:
    ...     copy(x, device)
    ... except Exception as error:
    ...     raise_if_out_of_memory(error, "to_device", x, [device], adapters=[adapter])
    ...     raise
"""

from __future__ import annotations

import traceback

from devshim import _tree, settings
from devshim.backends.memory_base import DeviceMemory, format_bytes
from devshim.errors import DeviceOutOfMemoryError

__all__ = ["raise_if_out_of_memory", "framework_of"]


def framework_of(error: BaseException, adapters=()):
    """`(adapter, DeviceMemory)` of the framework whose out-of-memory error `error` is, asking
    the `adapters` the failing step held; None when it is no such error.

    Example:
        >>> framework_of(torch.OutOfMemoryError("CUDA out of memory"), [ds.get_backend("torch")])[0].name
        'torch'
    """
    if isinstance(error, DeviceOutOfMemoryError):
        return None  # already named (a call inside another devshim call)
    for adapter in adapters:
        contract = adapter.peers.memory(adapter.name)  # (`peers`: the registry, which made the adapter)
        if contract.is_out_of_memory(error):
            return adapter, contract
    return None


def raise_if_out_of_memory(error: BaseException, call: str, value=None, devices=(), *, model=None,
                           adapters=()) -> None:
    """Raise `DeviceOutOfMemoryError` from `error` when it is a framework's out-of-memory
    error met in devshim's `call` (copying `value`, a tensor or a nest, or placing `model`,
    to `devices`: specs or native devices; `adapters` the frameworks the failing step held);
    return otherwise, and the caller re-raises `error` as it is.

    Example:
        >>> raise_if_out_of_memory(torch.OutOfMemoryError("..."), "to_device", x, ["gpu:0"])
        Traceback (most recent call last):
        devshim.errors.DeviceOutOfMemoryError: ds.to_device: gpu:0 out of memory. ...
    """
    found = framework_of(error, adapters)
    if found is None:
        return
    # The failed call's frames let go of what they made (half a nest, some replicas) before the
    # free bytes are read: what is free now is what was free before the call.
    traceback.clear_frames(error.__traceback__)
    # Raised, not kept in a variable: a frame holding its own exception keeps every tensor of the
    # frames below it alive (the traceback holds them) until the garbage collector runs.
    raise _named(error, found, call, value, devices, model) from error


def _named(error: BaseException, found: tuple, call: str, value, devices, model) -> DeviceOutOfMemoryError:
    adapter, contract = found
    places = _places(adapter, contract, devices)
    chosen = _ran_out(places, contract, error)
    # What was asked for comes last: the one walk of the value's nest (the tree walker's).
    asked, what = _safely(lambda: _asked(contract, value, model)) or (None, "")
    if chosen is None:  # of several devices, none named by the error: the first with less free than asked for
        chosen = next(((d, f) for d, f, _ in places if f is not None and asked is not None and f < asked), (None, None))
    device, free = chosen
    where = str(device) if device is not None else (
        "one of " + ", ".join(str(d) for d, _, _ in places) if places else "a device")
    others = (" (free on each: " + ", ".join(f"{d} {format_bytes(f)}" for d, f, _ in places) + ")"
              if len(places) > 1 else "")
    said = (str(error).strip().splitlines() or [""])[0]
    said = said if len(said) <= 200 else said[:200].rsplit(" ", 1)[0] + " ..."
    facts = "; ".join([f"it asked for {format_bytes(asked)}{what}" if asked is not None else
                       "how many bytes it asked for is unknown",
                       f"{format_bytes(free)} was free there before the call" if free is not None else
                       "the bytes free there are unknown"])
    message = (
        f"ds.{call}: {where} out of memory. {facts[0].upper()}{facts[1:]}{others}. {adapter.spec.title} said: "
        f"{type(error).__name__}: {said} What to do: {_advice(call, model)}{_hint(contract, device)}. "
        f"ds.memory({str(device) if device is not None else 'device'!r}) shows what is in use. (Worded as "
        f"CUDA's out-of-memory error, which accelerate's and Lightning's batch-size finders look for.)"
    )
    kind = DeviceOutOfMemoryError.for_framework(contract.error_class)
    return kind(message, device=device, requested=asked, free=free, call=f"ds.{call}")


def _advice(call: str, model) -> str:
    if model is None:
        return ("use a smaller batch, put the work on another device (ds.try_all_gpus() lists them), or free "
                "memory there: drop the tensors you no longer need (del, then let them go out of scope)")
    each = "each replica is the whole model: " if call == "replicate" else ""
    return (f"{each}use a smaller model (fewer or narrower layers, or a smaller dtype such as bfloat16), a "
            f"device with more free memory (ds.try_all_gpus() lists them), or split the model over devices "
            f"with a device map (ds.place_model(net, 'balanced'), or {{'block1': 'gpu:0', 'block2': 'gpu:1'}})")


def _asked(contract, value, model) -> tuple:
    """(bytes asked for or None, the words saying what they are): the model's parameters and
    buffers, the tensor's bytes, or a nest's tensors of the framework that ran out."""
    if model is not None:
        size = _safely(lambda: contract.model_bytes(model))
        return size, " (the model's parameters and buffers)"
    # The framework's count of each tensor, or any array's `nbytes` (ds.convert's source is another
    # framework's): one walk of the nest, its leaves' sizes only.
    sizes = [contract.nbytes(leaf) if contract.nbytes(leaf) is not None else DeviceMemory.nbytes(contract, leaf)
             for _, leaf in _tree.iter_leaves(value)] if value is not None else []
    known = [size for size in sizes if size is not None]
    if not known:
        return None, ""
    return sum(known), f" ({len(known)} tensors)" if len(known) > 1 else ""


def _places(adapter, contract, devices) -> list:
    """(ds.Device, free bytes or None, native device) of each device the call was copying to."""
    found = []
    for spec in devices:
        native = _safely(lambda spec=spec: adapter.target(spec))
        if native is not None:
            info = _safely(lambda native=native: contract.figures(adapter, native))
            found.append((adapter.describe(native), None if info is None else info.free, native))
    return found


def _ran_out(places: list, contract, error):
    """(device, free bytes) of the device that ran out where the places say it alone: the one
    device, or of several the one the framework's error names; None otherwise."""
    if len(places) == 1:
        return places[0][:2]
    for device, free, native in places:
        if _safely(lambda native=native: contract.names_device(error, native)):
            return device, free
    return None


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


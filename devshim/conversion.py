"""`ds.convert`: a tensor (or a nest of them) of one framework as a tensor of another.

The semantics are the array API's `from_dlpack(x, device=None, copy=None)`,
with devshim's rule that crossing devices is always explicit:

- without `device=`, the result lives on `x`'s own device (devshim's
  `Device` equality: kind, index, virtual flag). `copy=None` shares
  `x`'s memory through DLPack when the pair can, and copies on that device
  when it cannot; `copy=True` always makes new storage; `copy=False` shares
  or raises `CopyRequiredError` (a `BufferError`) saying why;
- when the target framework has no array on `x`'s device (NumPy and a GPU),
  the conversion would copy to the target's CPU: an implicit transfer, which
  `ds.transfer_guard` logs ("log") or refuses with
  `CrossDeviceConversionError` ("disallow");
- with `device=` another device, the result is a copy there, made through
  `devshim.transfer` (so guards let it through) and counted in the
  `report.explicit` of every enclosing `transfer_guard` block.

Virtual GPUs: virtual `gpu:i` of one framework is virtual `gpu:i` of
another (no guard is involved), but their memories are kept apart as real
GPUs' are: converting between two frameworks' virtual GPUs copies on the
target device, so `copy=False` refuses there.

A device that runs out of memory raises `ds.DeviceOutOfMemoryError`, the framework's error
as its cause.

Framework-specific code lives in each backend's optional `interop.py`: one
subclass of `devshim.backends.interop_base.Interop` (docs/adapters.md).

Example:
    >>> j = ds.convert(torch.ones(3), "jax")          # shares the torch tensor's memory
    >>> t = ds.convert({"x": j}, torch)                # nests, and modules as targets
    >>> n = ds.convert(t["x"], "numpy", copy=True)     # new storage
"""

from __future__ import annotations

from typing import Any, Optional

from devshim import _tree, transfer
from devshim.types import DeviceSpec, Nest
from devshim.guard import marker
from devshim.guard.report import direction_of
from devshim.backends import backend_for_tensor, canonical_name, interop, load_backend, specs
from devshim.backends.out_of_memory import raise_if_out_of_memory
from devshim.errors import (
    BackendError, CopyRequiredError, CrossDeviceConversionError, DevshimError,
)

__all__ = ["convert", "interop_for", "target_backend"]



def interop_for(adapter):
    """The `Interop` of `adapter`'s backend (its `interop.py`); BackendError when it has none.

    Example:
        >>> interop_for(ds.get_backend("torch")).pointer(ds.get_backend("torch"), torch.ones(2))
        94520134513344
    """
    found = interop(adapter.name)
    if found is None:
        raise BackendError(
            f"The {adapter.name} backend has no interop.py, so ds.convert cannot take or make "
            f"its tensors. Convert through NumPy instead: ds.to_numpy(x), then the framework's "
            f"own constructor."
        )
    return found


def target_backend(to):
    """The backend adapter `to` names: a name or alias, a tensor of it, or its module.

    Example:
        >>> target_backend("pytorch").name, target_backend(jax.numpy).name
        ('torch', 'jax')
    """
    if isinstance(to, str):
        return load_backend(canonical_name(to))
    owner = backend_for_tensor(to)
    if owner is not None:
        return owner
    name = getattr(to, "__name__", None) if type(to).__name__ == "module" else None
    if isinstance(name, str):
        top = name.split(".")[0]
        for spec in specs().values():
            if spec.import_name == top:
                return load_backend(spec.name)
    names = [repr(name) for name in specs()]
    aliases = [repr(alias) for spec in specs().values() for alias in spec.aliases][:1]
    raise BackendError(
        f"ds.convert cannot tell which framework {to!r} ({type(to).__name__}) means. Name it "
        f"({', '.join(names)}{', or an alias such as ' + aliases[0] if aliases else ''}), pass "
        f"one of its tensors, or its module."
    )


def convert(x: Nest, to: Any, *, device: Optional[DeviceSpec] = None, copy: Optional[bool] = None) -> Nest:
    """`x` (a tensor or a nest of them) as tensors of the framework `to`.

    `to` is a framework name (`"torch"`, `"jax"`, `"tensorflow"`,
    `"mxnet"`, `"cupy"`, `"numpy"` or an alias), a tensor of it, or its
    module. On `x`'s own device the result shares `x`'s memory (DLPack)
    where the pair allows; `copy=True` always gives new storage,
    `copy=False` raises `CopyRequiredError` when sharing is impossible.
    `device=` another device makes an explicit copy there, which transfer
    guards allow and count in `report.explicit`. A conversion that would
    have to leave `x`'s device without `device=` is an implicit transfer:
    refused under `transfer_guard("disallow")` (`CrossDeviceConversionError`).
    Converted tensors do not carry autograd history to the other framework.

    Example:
        >>> j = ds.convert(torch.arange(3.0), "jax")            # zero-copy on the CPU
        >>> t = ds.convert(j, torch, device=ds.try_gpu())       # explicit copy to the GPU
        >>> batch = ds.convert({"x": X, "y": Y}, "tensorflow", copy=True)
    """
    if copy is not None and copy is not True and copy is not False:
        raise CopyRequiredError(f"copy= must be None, True or False, not {copy!r}.")
    target = target_backend(to)
    _ = target.fw  # imported now: tensors it makes must be recognised by dispatch
    want = None
    if device is not None:
        # device(), not target(): a NumPy target's target() lands another framework's device in
        # that framework (to_device's rule); here the result must be a tensor of `to` itself.
        native = target.device(device)
        want = (native, target.describe(native))
    name = target.name
    source = backend_for_tensor(x)
    if source is not None:  # one tensor
        return _leaf(x, source, target, want, copy, name)

    def leaf_for(value):  # each tensor of a nest converted by itself (a lone value that is no tensor: refused)
        owner = backend_for_tensor(value)
        if owner is None:
            return None
        return lambda leaf: _leaf(leaf, owner, target, want, copy, name)

    return _tree.map_nest(x, leaf_for, False, None, "convert")


# ------------------------------------------------------------------ one tensor


def _leaf(x, source, target, want, copy, name: str):
    try:  # costs nothing until something is raised
        return _convert_leaf(x, source, target, want, copy, name)
    except Exception as error:  # a device out of memory: named from the two frameworks in hand
        where = want[0] if want is not None else _safe_device(source, x)
        raise_if_out_of_memory(error, "convert", x, [where] if where is not None else [], adapters=(target, source))
        raise


def _safe_device(adapter, x):
    try:
        return adapter.tensor_device(x)
    except DevshimError:
        return None


def _convert_leaf(x, source, target, want, copy, name: str):
    here = source.tensor_device(x)
    if want is None:
        native = _same_place(target, here)
        if native is None:  # the target has no array on x's device: an implicit crossing
            native = interop_for(target).host_device(target)
            there = target.describe(native)
            if copy is False:
                raise _no_share(name, f"{target.spec.title} has no array on {here}, so the result "
                                      f"would be a copy on {there}")
            error = CrossDeviceConversionError(
                f"ds.convert(x, {name!r}) would copy x from {here} to {there}: {target.spec.title} "
                f"has no array on {here}. Make the copy explicit with "
                f"ds.convert(x, {name!r}, device={str(there)!r}), or allow it with "
                f"ds.transfer_guard({direction_of(here, there)[0]}='allow')."
            )
            transfer.crossing(direction_of(here, there)[0], f"ds.convert(x, {name!r})", here, there,
                              explicit=False, error=error)
            return _copy(x, source, target, native)
        return _on_device(x, source, target, native, here, copy, name)
    native, there = want
    if there == here:
        return _on_device(x, source, target, native, here, copy, name)
    if copy is False:
        raise _no_share(name, f"x is on {here} and device={str(there)!r} is another device")
    transfer.crossing(direction_of(here, there)[0], f"ds.convert(x, {name!r}, device={str(there)!r})",
                      here, there, explicit=True)
    return _copy(x, source, target, native)


def _on_device(x, source, target, native, here, copy, name: str):
    """`x` as a `target` tensor on its own device `here` (`native` in `target`)."""
    if source is target:
        return source.copy_to(x, native, False) if copy else x
    if copy is True:
        return _copy(x, source, target, native)
    try:
        if here.virtual:
            raise CopyRequiredError(
                f"x is on virtual {here}; devshim keeps each framework's virtual GPUs apart, as two "
                f"frameworks' memories on a real GPU would only meet through DLPack, so the result "
                f"is a copy there")
        return _share(x, source, target, native)
    except CopyRequiredError as why:
        if copy is False:
            raise _no_share(name, str(why)) from None
    return _copy(x, source, target, native)


def _share(x, source, target, native):
    src, dst = interop_for(source), interop_for(target)
    exported = src.export(source, x)
    before = src.pointer(source, x)
    alignment = dst.host_alignment
    if alignment and before is not None and before % alignment:
        raise CopyRequiredError(f"{target.spec.title} needs host memory aligned to {alignment} bytes, and "
                                f"x's first element is at {before % alignment} bytes past such an address")
    y = dst.adopt(target, exported, native, src.immutable)
    if not target.same_place(y, native):
        raise CopyRequiredError(f"{target.spec.title} placed the import on {target.tensor_device(y)}")
    after = dst.pointer(target, y)
    if before is not None and after is not None and before != after and _nbytes(x):
        raise CopyRequiredError(f"{target.spec.title}'s DLPack import copied this tensor (its "
                                f"layout or alignment is not one it can use in place)")
    return y


def _copy(x, source, target, native):
    """New storage on `native`: `x` copied by its own framework, or another's `x`'s exact
    values through the host."""
    if marker.watchers:
        with transfer.explicit():
            return _copied(x, source, target, native)
    return _copied(x, source, target, native)


def _copied(x, source, target, native):
    if source is target:
        return source.copy_to(x, native, False)
    return interop_for(target).from_host(target, _host_copy(source, x), native)


def _host_copy(source, x):
    """`x`'s values as a fresh NumPy array in the machine's byte order: NumPy keeps a
    big-endian array's order in its copies, and torch and JAX refuse to take one."""
    array = source.tensor_to_numpy(x)
    dtype = getattr(array, "dtype", None)
    if dtype is not None and not dtype.isnative:
        array = array.astype(dtype.newbyteorder("="))
    return array


def _nbytes(x) -> int:
    size = getattr(x, "size", None)
    if callable(size):  # torch: size() is the shape
        return x.numel()
    try:
        return int(size) if size is not None else 1
    except TypeError:
        return 1


def _same_place(target, here):
    """`target`'s native device equal to `here`, or None when it presents no such device."""
    try:
        native = target.device(here)
    except DevshimError:
        return None
    return native if target.describe(native) == here else None


def _no_share(name: str, why: str) -> CopyRequiredError:
    return CopyRequiredError(
        f"ds.convert(x, {name!r}, copy=False) cannot share x's memory: {why}. Pass copy=None to "
        f"let it copy when it must, or copy=True to always copy."
    )

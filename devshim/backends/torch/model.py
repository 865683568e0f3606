"""Placing torch `nn.Module`s: one device, a device map with input-copying hooks, replicas.

`module.to` moves parameters and every buffer (non-persistent ones too), in
place, so a weight shared by two submodules stays one tensor. A split model's
placed submodules get forward pre-hooks (registered with torch's own
`register_forward_pre_hook(..., with_kwargs=True)`, removable, `forward`
untouched) that copy their tensor inputs to the submodule's device with
`ds.copy_if_needed`: explicit copies, which autograd differentiates and the
transfer guard allows.

Under a launcher, placing a model on this process's accelerator also makes it the
current device (`torch.cuda.set_device`), so wrapping the model in
`DistributedDataParallel` right after needs nothing more.

Keras 3 models on torch (`KERAS_BACKEND=torch`) are `nn.Module`s too, but Keras copies every
input, and every weight, to its current device on each call (`keras.device(...)`, else
`KERAS_TORCH_DEVICE` or its own pick). They are moved with `module.to` and then placed the
Keras way (`devshim.backends.keras_base`): their calls and training run under
`keras.device(device)`. Once devshim meets Keras on torch, `keras.device` also takes torch
devices (`keras.device(ds.try_gpu(1))`), virtual GPUs included, and a `KERAS_TORCH_DEVICE`
naming a virtual GPU (`vgpu:1`) finds devshim's virtual GPUs registered.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import weakref

import torch

from devshim import settings
from devshim.backends import keras_base
from devshim.backends.model_base import ModelPlacement
from devshim.backends.nests import copy_nest_if_needed
from devshim.backends.torch import _internals
from devshim.backends.torch._names import VIRTUAL_TYPE
from devshim.errors import DevshimError, UnbuiltModelError, UnknownSubmoduleError, UnsupportedPlacementError

_handles: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> its hook handles


def _check_built(module) -> None:
    lazy = [name for name, p in module.named_parameters()
            if isinstance(p, torch.nn.parameter.UninitializedParameter)]
    if lazy:
        raise UnbuiltModelError(
            f"This {type(module).__name__} has no parameters yet: {', '.join(lazy[:4])} "
            f"{'are' if len(lazy) > 1 else 'is'} lazy (torch.nn.Lazy* layers get their shape from the "
            f"first input). Run one forward pass with a sample batch first, then place or ask again."
        )


def _tied(module) -> list:
    """Groups of names under which one parameter appears more than once (tied weights)."""
    groups: dict = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def _retie(module, groups: list):
    # module.to() keeps ties when it can convert parameters in place; across device types
    # whose tensors differ in kind (to meta, say) it makes a new Parameter per occurrence.
    for names in groups:
        first = module.get_parameter(names[0])
        for name in names[1:]:
            owner, _, attr = name.rpartition(".")
            setattr(module.get_submodule(owner) if owner else module, attr, first)
    return module


def _refuse_split_ties(groups: list, natives: dict, adapter) -> None:
    def placed(name: str):
        prefixes = [prefix for prefix in natives if name == prefix or name.startswith(prefix + ".") or not prefix]
        return adapter.describe(natives[max(prefixes, key=len)]) if prefixes else None

    for names in groups:
        where = {str(placed(name)) for name in names}
        if len(where) > 1:
            raise UnsupportedPlacementError(
                f"{' and '.join(names)} are one tied parameter, which cannot live on "
                f"{' and '.join(sorted(where))} at once. Put the modules that share it on one device, "
                f"or untie it."
            )


def _submodule(module, name: str):
    if not name:
        return module
    try:
        return module.get_submodule(name)
    except AttributeError:
        children = [child for child, _ in module.named_children()]
        listing = ", ".join(repr(c) for c in children[:12]) + (" ..." if len(children) > 12 else "")
        raise UnknownSubmoduleError(
            f"{type(module).__name__} has no submodule {name!r}, so nothing was placed. Use the "
            f"names net.named_modules() gives: its top-level children are {listing or 'none'}, and "
            f"deeper ones are named with dots ('0.linear')."
        ) from None


def _snapshot(module) -> list:
    """(slot, name, tensor, data, grad) for every parameter and buffer (a buffer's data and grad None):
    what a rollback restores (nothing, on a torch whose modules keep them elsewhere: _internals.MODULE_SLOTS)."""
    slots = _internals.MODULE_SLOTS.get()
    if slots is None:
        return []
    saved: list = []
    for owner in module.modules():
        parameters, buffers = getattr(owner, slots[0]), getattr(owner, slots[1])
        saved += [(parameters, name, p, p.data, p.grad) for name, p in parameters.items() if p is not None]
        saved += [(buffers, name, b, None, None) for name, b in buffers.items() if b is not None]
    return saved


def _places_of(block) -> set:
    return {t.device for t in block.parameters()} | {t.device for t in block.buffers()}


def _restore(saved: list, moved: list) -> None:
    # A block that lived on one device goes back with module.to, as it came (that works wherever
    # module.to does, virtual GPUs included); then every tensor object is put back in its slot.
    for block, places in reversed(moved):
        if len(places) == 1:
            with contextlib.suppress(Exception):  # (the per-tensor restore below still runs)
                block.to(next(iter(places)))
    with torch.no_grad():
        for slot, name, tensor, data, grad in saved:
            if data is not None:  # a parameter
                # module.to above brought a block back with a copy (new memory, when it had
                # reached another device): the parameter takes its own memory back, as it was.
                if (tensor.device != data.device or not _same_memory(tensor, data)) and not _take_back(tensor, data):
                    continue  # module.to above made a new Parameter on the old device: keep that
                if tensor.grad is not grad and (grad is None or grad.device == tensor.device):
                    tensor.grad = grad
            slot[name] = tensor


def _take_back(tensor, data) -> bool:
    """Give parameter `tensor` its own memory `data` back; whether it could. A parameter
    `module.to` swapped in place (`torch.utils.swap_tensors`: a virtual GPU's tensor class)
    cannot take a host tensor's `.data`: it is swapped back."""
    try:
        tensor.data = data
    except Exception:  # noqa: BLE001 - a pair torch cannot change in place: swap the object back
        try:
            torch.utils.swap_tensors(tensor, torch.nn.Parameter(data, requires_grad=tensor.requires_grad))
        except Exception:  # noqa: BLE001 - (a tensor something holds a weak reference to)
            return False
    return True


def _same_memory(a, b) -> bool:
    try:
        return a.data_ptr() == b.data_ptr()
    except (RuntimeError, NotImplementedError):  # a tensor without storage to compare
        return True


def _copier(native):
    def copy_inputs(block, args, kwargs):
        return copy_nest_if_needed(args, native), copy_nest_if_needed(kwargs, native)

    return copy_inputs


# ------------------------------------------------------------------ Keras 3 on torch

_keras_met: list = []  # [whether keras.device takes torch devices], once devshim has met Keras


def meet_keras(adapter) -> bool:
    """Make `keras.device` take torch devices (wrapping Keras's reading of its argument, once),
    and register the virtual GPUs a `KERAS_TORCH_DEVICE` names; whether `keras.device` takes them.

    Example:
        >>> meet_keras(ds.get_backend("torch"))
        True
    """
    if not _keras_met:
        slot = _internals.KERAS_DEVICE_INPUT.get()
        if slot is not None and not getattr(slot.current(), "_devshim_takes_torch_devices", False):
            setattr(slot.owner, slot.name, _taking_torch_devices(slot.current()))
        _keras_met.append(slot is not None)
    current = _internals.KERAS_CURRENT_DEVICE.get()
    default = current() if current is not None else None
    if isinstance(default, str) and default.strip().lower().startswith(VIRTUAL_TYPE):
        adapter.check_platform(VIRTUAL_TYPE)  # DeviceUnavailableError, naming the variable, when they are off
        _, _, index = default.partition(":")
        adapter.device(f"gpu:{index.strip() or 0}")  # registers them (InvalidDeviceError past their number)
    return _keras_met[0]


def _taking_torch_devices(original):
    @functools.wraps(original)
    def device_input(device_name):
        if isinstance(device_name, torch.device):
            return device_name
        if isinstance(device_name, str) and device_name.strip().lower().startswith(VIRTUAL_TYPE):
            return torch.device(device_name.strip().lower())  # (Keras would make "vgpu" "vcuda")
        return original(device_name)

    device_input._devshim_takes_torch_devices = True
    return device_input


class _KerasOnTorch(keras_base.KerasModels):
    """Keras 3 models on torch: moved in place by `module.to`, then run under `keras.device`."""

    def keras_device(self, native):
        if _keras_met and _keras_met[0]:
            return native
        # What Keras's own reading takes: it lowers the name and makes "gpu" "cuda".
        return f"privateuseone:{native.index}" if native.type == VIRTUAL_TYPE else str(native)

    def move_weights(self, model, native, adapter):
        model.to(native)  # moves the parameters in place: Keras's variables hold the same objects
        for variable in model.variables:
            if variable.value.device != native:  # a variable no layer registered as a parameter
                self.move_variable(variable, native, adapter)
        return model

    def move_variable(self, variable, native, adapter) -> bool:
        torch.nn.ParameterList([variable.value]).to(native)  # in place, as module.to moves parameters
        return variable.value.device == native

    def place(self, model, native, adapter, input_shape=None):
        meet_keras(adapter)
        return super().place(model, native, adapter, input_shape)

    def computing_device(self, model, adapter):
        current = _internals.KERAS_CURRENT_DEVICE.get()
        if current is None:
            return None
        try:
            return adapter.describe(torch.device(current()))
        except (RuntimeError, DevshimError):  # a device string torch or devshim cannot read
            return None


_KERAS = _KerasOnTorch(_internals)


class TorchPlacement(ModelPlacement):
    """Placement of PyTorch modules (the contract: `devshim.backends.model_base.ModelPlacement`).

    Example:
        >>> ds.backends.model_placement("torch").is_model(net)
        True
    """

    def is_model(self, obj) -> bool:
        return isinstance(obj, torch.nn.Module)

    def for_model(self, module):
        return _KERAS if keras_base.is_model(module) else self  # a Keras 3 model is an nn.Module too

    def keras_imported(self, adapter) -> None:
        meet_keras(adapter)

    def named_places(self, module, adapter) -> list:
        """(name, Device) for each parameter (tied ones once) and each buffer."""
        _check_built(module)
        found = [(name, adapter.tensor_device(p)) for name, p in module.named_parameters()]
        found += [(name, adapter.tensor_device(b)) for name, b in module.named_buffers()]
        if not found:
            raise UnbuiltModelError(
                f"This {type(module).__name__} has no parameters or buffers, so it is on no device: "
                f"there is nothing to place. Models with weights can be asked."
            )
        return found

    def place(self, module, native, adapter, input_shape=None):
        _check_built(module)
        groups = _tied(module)
        saved, places = _snapshot(module), _places_of(module)
        try:
            module.to(native)
        except BaseException:
            _restore(saved, [(module, places)])  # out of memory midway: every tensor back where it lived
            raise
        _retie(module, groups)
        launch = settings.launcher()
        if launch is not None and launch.one_device_per_process and native == adapter.try_gpu():
            # One process of several, placed on its own accelerator: make that the current device,
            # as torch.distributed expects of a rank (NCCL's barrier, DDP, a bare "cuda" in user code).
            adapter.make_current(native)
        return module

    def child_sizes(self, module) -> list:
        """(name, parameter bytes) of each top-level child, in order: what "balanced" spreads."""
        return [(name, sum(p.numel() * p.element_size() for p in child.parameters()))
                for name, child in module.named_children()]

    def place_map(self, module, natives: dict, adapter):
        _check_built(module)
        blocks = {name: _submodule(module, name) for name in natives}  # every name, before moving
        groups = _tied(module)
        _refuse_split_ties(groups, natives, adapter)
        saved = _snapshot(module)
        handles, moved = [], []
        try:
            for name, native in natives.items():
                block = blocks[name]
                moved.append((block, _places_of(block)))
                block.to(native)
                handles.append(block.register_forward_pre_hook(_copier(native), with_kwargs=True))
            _retie(module, groups)
        except BaseException:
            for handle in handles:
                handle.remove()
            _restore(saved, moved)  # the model as it was: every tensor back where it lived
            raise
        self.unplace(module)  # the hooks of an earlier split, now replaced
        _handles[module] = handles
        return module

    def unplace(self, module) -> None:
        for handle in _handles.pop(module, ()):
            handle.remove()

    def replicate(self, module, natives: list, adapter) -> list:
        _check_built(module)
        if _handles.get(module):
            raise UnsupportedPlacementError(
                f"This {type(module).__name__} is split over devices by ds.place_model; its replicas would "
                f"keep copying inputs to the original's devices. Call ds.unplace(net) first, or replicate "
                f"the model before splitting it."
            )
        groups = _tied(module)
        # deepcopy keeps ties; .to may not (meta)
        return [_retie(copy.deepcopy(module).to(native), groups) for native in natives]


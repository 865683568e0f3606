"""Host reads of a virtual tensor: what `tolist()`, `numpy()`, printing, storage,
pickling and `t.data = ...` do, with CUDA's rules.

`numpy()` and `numpy.asarray(t)` refuse, as on CUDA (copy first: `t.cpu()`,
`ds.to_numpy(t)`); `item()`, `tolist()` and printing read the values, as on CUDA.
`SPECIAL` maps each torch.Tensor method to the function here that answers it for a
virtual tensor (`tensor.py` routes them). A virtual tensor is recognised by its device
type; this module does not need the tensor class.
"""

from __future__ import annotations

import torch

from devshim.backends.torch import _internals
from devshim.backends.torch._names import VIRTUAL_TYPE
from devshim.backends.torch._virtual import memory as _memory, saving as _saving
from devshim.errors import NotOnHostError, UnsupportedValueError, VirtualDLPackError

__all__ = ["SPECIAL", "refuse_dlpack"]

_DisableTorchFunctionSubclass = _internals.DISABLE_TORCH_FUNCTION_SUBCLASS.get()
_tensor_text = _internals.TENSOR_TEXT.get()
_PARAMETER_MARK = _internals.PARAMETER_MARK.get()


def _is_virtual(value) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == VIRTUAL_TYPE


def _not_on_host(self) -> NotOnHostError:
    return NotOnHostError(
        f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy the "
        f"tensor to host memory first. ({self.device} is a devshim virtual GPU and refuses "
        f"implicit host views as CUDA does; ds.to_numpy(t) copies for you.)"
    )


def refuse_dlpack(self, *args, **kwargs):
    """A virtual tensor's DLPack capsule asked for by anything but torch (dlpack.py)."""
    raise VirtualDLPackError(
        f"{self.device} is a devshim virtual GPU: its tensors' DLPack capsules are for torch's own "
        f"torch.from_dlpack only (which shares the memory on the virtual GPU, as on CUDA); another "
        f"framework would take its host memory for a GPU's. Copy instead: ds.convert(t, 'numpy') "
        f"(or any framework, e.g. ds.convert(t, 'jax')), or t.cpu() before DLPack."
    )


def _tolist(self, *args, **kwargs):
    return self._host.tolist()


def _numpy(self, *, force: bool = False):
    if not force:
        raise _not_on_host(self)
    return self._host.detach().clone().numpy(force=True)


def _array(self, dtype=None, *args, **kwargs):
    raise _not_on_host(self)


def _format(self, spec):
    if self.dim() == 0:
        return self.item().__format__(spec)
    return object.__format__(self, spec)


def _repr(self, *args, **kwargs):
    # torch prints a tensor subclass under its class name; print as a CUDA tensor prints.
    prefix = f"{type(self).__name__}("
    text = _tensor_text(self)
    param = getattr(self, _PARAMETER_MARK, False)
    if param and text.startswith("Parameter(") and text.endswith(")"):
        text = text[len("Parameter("):-1]
    if text.startswith(prefix):
        shift = len(prefix) - len("tensor(")
        lines = text.split("\n")
        lines[0] = "tensor(" + lines[0][len(prefix):]
        lines[1:] = [line[shift:] if line[:shift].isspace() else line for line in lines[1:]]
        text = "\n".join(lines)
    if param:
        text = "Parameter containing:\n" + text
    return text


def _data_ptr(self):
    return self._host.data_ptr()


def _set_data(self, value):
    if not (_is_virtual(self) and _is_virtual(value)):
        raise UnsupportedValueError(
            f"t.data = <a {value.device} tensor> cannot turn a {self.device} tensor into a "
            f"{value.device} one in place when one of them is on a devshim virtual GPU (on CUDA "
            f"it could). Assign a tensor on t's device, e.g. t.data = value.to(t.device), or move "
            f"the whole module with module.to(device)."
        )
    with _DisableTorchFunctionSubclass():
        torch.Tensor.data.__set__(self, value)
    # Its own host tensor over the same memory: an in-place change of `value`'s shape
    # (value.t_()) must not reach `self`, whose sizes torch now keeps apart (as on CUDA).
    self._host = value._host.detach()
    self._device = value._device


def _new_tensor(self, data, *args, **kwargs):
    # torch resolves the device of new_tensor through the device guard's *current*
    # device, which a Python device guard cannot hold: name it.
    if kwargs.get("device") is None and len(args) < 2:
        kwargs["device"] = self.device
    with _DisableTorchFunctionSubclass():
        return torch.Tensor.new_tensor(self, data, *args, **kwargs)


def _reduce(self, proto):
    # As torch pickles a CUDA tensor: its storage, tagged with its device (saving.py).
    return _saving.reduce(self)


SPECIAL = {
    torch.Tensor.tolist: _tolist,
    torch.Tensor.numpy: _numpy,
    torch.Tensor.__array__: _array,
    torch.Tensor.__format__: _format,
    torch.Tensor.__repr__: _repr,
    torch.Tensor.untyped_storage: _memory.storage_of,  # on the virtual GPU; its resize_ is counted
    torch.Tensor.data_ptr: _data_ptr,
    torch.Tensor.data.__set__: _set_data,
    torch.Tensor.new_tensor: _new_tensor,
    torch.Tensor.__reduce_ex__: _reduce,
}



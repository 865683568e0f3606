"""Running ATen operations on virtual tensors: CUDA's device rules, then the host kernel.

Every ATen operation on a virtual tensor arrives here (from
`VirtualTensor.__torch_dispatch__`, or from the PrivateUse1 kernels `registration.py`
installs), below autograd. `run` checks devices the way CUDA does, runs the operation on
the host tensors, and wraps the results on the same virtual GPU. The tensor class is
passed in (`cls`, as torch passes it to `__torch_dispatch__`), so this module sits
below `tensor.py`.
"""

from __future__ import annotations

import torch

from devshim.backends.torch import _internals
from devshim.backends.torch._names import VIRTUAL_TYPE
from devshim.backends.torch._virtual.count import is_virtual_type as _is_virtual_type
from devshim.backends.torch._virtual.count import target as _target
from devshim.backends.torch._virtual import generators as _random
from devshim.backends.torch._virtual import memory as _memory
from devshim.backends.torch._virtual.rnn import HOST_KERNELS as _RNN_KERNELS
from devshim.backends.torch._virtual.saving import host_storage as _host_storage
from devshim.errors import DeviceMismatchError, UnsupportedValueError, VirtualDLPackError

__all__ = ["run", "torch_dispatch", "backend_kernel", "quantized_kernel", "single_threaded_autograd", "new",
           "new_view", "follow_host", "refuse_quantized"]

# The private torch names used here come from the probes in torch/_internals.py (the package
# refuses to load without one of them: see __init__).
_get_flags, _set_flags = _internals.TENSOR_METADATA.get()  # conj, neg: the flags a tensor keeps itself
_storage_at = _internals.STORAGE_FROM_POINTER.get()         # a storage over given memory
_OpOverload, _kernel_of, _schema_of = _internals.OP_PARTS.get()

_aten = torch.ops.aten
_CPU = torch.device("cpu")
_embedding = _kernel_of(_aten.embedding.default)


def _dense_embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """`aten::embedding` on a virtual GPU, refusing `sparse=True` by name in the forward: its
    backward would make a sparse gradient, which a virtual GPU cannot hold, and an error raised
    inside torch's autograd engine there ends the process (torch 2.13: "terminate called without
    an active exception")."""
    if sparse:
        raise UnsupportedValueError(
            "devshim's virtual GPUs hold dense tensors only, and an embedding with sparse=True makes a "
            "sparse gradient in its backward. Use sparse=False (nn.Embedding(..., sparse=False), "
            "F.embedding(..., sparse=False)): the gradient is the same, dense; or run the "
            "embedding on the CPU."
        )
    return _embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse)


# Operators run by a host implementation of devshim's own instead of torch's kernel.
_HOST_KERNELS = {**_RNN_KERNELS, _aten.embedding.default: _dense_embedding}
_STRIDED = torch.strided
_Tensor = torch.Tensor
_make_wrapper_subclass = _internals.WRAPPER_SUBCLASS.get()
_account = _memory.account


def new(cls, host, device):
    """A `cls` (virtual tensor) on virtual GPU `device` (a torch.device) holding CPU tensor
    `host`. The wrapper carries `host`'s sizes, strides and storage offset itself, so torch
    reads them in C++ without calling back into Python; the operations that change them in
    place make the wrapper follow (`follow_host`). Its device is also kept as the plain
    attribute `_device`, which the hot path reads without going through torch. Its storage
    is counted against the virtual GPU (`memory.account`), which refuses one past the GPU's
    size with `torch.OutOfMemoryError`."""
    if host.layout != _STRIDED:
        raise UnsupportedValueError(
            f"devshim's virtual GPUs hold dense (strided) tensors only, not {host.layout}. "
            f"Keep this tensor on the CPU, or convert it first, e.g. x.to_dense()."
        )
    _account(host, device)
    # layout (strided) and requires_grad (False) are the defaults: fewer keywords to parse.
    self = _make_wrapper_subclass(
        cls, host.size(), strides=host.stride(), storage_offset=host.storage_offset(),
        dtype=host.dtype, device=device,
    )
    self._host = host
    self._device = device
    return self


def new_view(cls, host, device):
    """`new`, for a host tensor that may carry flags torch keeps on the tensor rather than
    its storage (the lazy conjugate and negative bits, which views pass on and `conj()` and
    `x.conj().imag` set): the wrapper gets them too, so torch's conjugate fallback, `is_conj()`
    and every kernel read the same as on the host."""
    self = new(cls, host, device)
    flags = _get_flags(host)
    if flags:
        _set_flags(self, flags)
    return self


def follow_host(tensor) -> None:
    """Give virtual tensor `tensor` the sizes, strides and storage offset its host tensor has
    now, after an operation changed the host's in place (`t_()`, `resize_()`, `set_()`,
    an `out=` that resized, ...). torch's `set_data` (what `t.data = v` runs) copies the
    metadata of a fresh wrapper into it, keeping the tensor's identity, autograd history and
    version counter; torch function handling is off meanwhile, so no mode sees the step."""
    fresh = new_view(type(tensor), tensor._host, tensor._device)  # shares the host: set_data asks both its kind
    with _DisableTorchFunction():
        _set_data(tensor, fresh)
    _memory.recount(tensor._host, tensor._device)  # a resize_ or set_ may have changed its storage


_DisableTorchFunction = _internals.DISABLE_TORCH_FUNCTION.get()
_set_data = _internals.TENSOR_DATA.get().__set__

def single_threaded_autograd() -> None:
    # See the package docstring: torch's engine has one queue for the single device the
    # Python guard reports, so a backward pass over vgpu:1 must run on the calling thread.
    # Checked on every call, not once per thread: while it runs a node, the engine puts
    # back the thread state captured when the backward pass began, and the node that
    # hands gradients to a virtual GPU is the one that must see the switch.
    if _multithreading_enabled():
        _set_multithreading_enabled(False)


_multithreading_enabled, _set_multithreading_enabled = _internals.AUTOGRAD_THREADS.get()


# Operations that change their tensor arguments' sizes, strides or storage offset in place,
# beyond those torch tags `inplace_view` (t_, transpose_, squeeze_, unsqueeze_, as_strided_,
# ...) and the out= arguments an operation may resize: name -> the arguments to follow.
_RESHAPING = {
    **dict.fromkeys(("resize_", "resize_as_", "set_", "_resize_output_"), None),  # their a! arguments
    "_copy_from_and_resize": (1, "dst"),
}

# Operations that take tensors of any devices: copies, and a comparison of shapes.
_ANY_DEVICE = frozenset(op for op in (
    _aten.copy_.default, _aten._copy_from.default, _aten._copy_from_and_resize.default,
    _aten._to_copy.default, _aten.is_same_size.default,
))

# Arguments CUDA kernels take from the CPU (of any shape): index tensors, CTC lengths, and
# the batch sizes of packed sequences. Anywhere else they must match the other tensors.
_HOST_ARGUMENT_NAMES = {
    **dict.fromkeys(("index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index",
                     "_unsafe_index_put"), frozenset({"indices"})),
    **dict.fromkeys(("ctc_loss", "_ctc_loss", "_ctc_loss_backward"),
                    frozenset({"input_lengths", "target_lengths"})),
    "_pack_padded_sequence": frozenset({"lengths"}),
    **dict.fromkeys(("_pack_padded_sequence_backward", "_pad_packed_sequence", "lstm", "gru",
                     "rnn_tanh", "rnn_relu"), frozenset({"batch_sizes"})),
}


def _unwrap(cls, value, seen: list, host_ok: bool = False):
    """`value` with virtual tensors replaced by their host tensors; the device of every
    tensor that must agree with the others goes into `seen`. CPU tensors agree with
    everything when they are 0-dim (as on CUDA) or `host_ok` (an argument CUDA reads
    from the CPU)."""
    if isinstance(value, cls):
        seen.append(value._device)
        return value._host
    if isinstance(value, _Tensor):
        if value.device.type != "cpu" or not (host_ok or value.dim() == 0):
            seen.append(value.device)
            if value.device.type == VIRTUAL_TYPE:  # a plain tensor of a virtual GPU (_adopt)
                return _adopt(cls, value, {})._host
        return value
    if type(value) is list or type(value) is tuple:
        return type(value)([_unwrap(cls, item, seen, host_ok) for item in value])
    return value


def _has(cls, values, foreign: bool = False) -> bool:
    """Whether `values` (lists and tuples searched too) hold a virtual tensor, or with `foreign`
    a tensor of a virtual GPU that is not one (see `_adopt_foreign`)."""
    for value in values:
        if _is_foreign(cls, value) if foreign else isinstance(value, cls):
            return True
        if (type(value) is list or type(value) is tuple) and _has(cls, value, foreign):
            return True
    return False


def _mismatch(func, first, other) -> DeviceMismatchError:
    if _is_virtual_type(other) and not _is_virtual_type(first):
        first, other = other, first
    return DeviceMismatchError(
        f"Expected all tensors to be on the same device, but found at least two devices, "
        f"{first} and {other}! ({func} got tensors on both; {first} is a devshim virtual GPU, "
        f"which refuses mixed devices as CUDA does. Copy one side first, e.g. "
        f"ds.to_device(t, {str(first)!r}) or t.to({str(first)!r}).)"
    )


class _Plan:
    """What `run` needs to know about one operator, worked out on its first call, so a
    call costs one lookup (by `id`: an OpOverload hashes in Python) rather than several."""

    __slots__ = ("func", "name", "foreach", "host_positions", "host_names", "any_device", "kernel",
                 "aliases", "reshapes", "views", "tensor_positions", "returns_first", "seeded",
                 "generator", "quantizes", "storages")

    def __init__(self, func) -> None:
        schema = _schema_of(func)
        arguments = list(enumerate(schema.arguments))
        self.func = func
        self.name = name = func.__name__.split(".")[0]
        self.foreach = func.__name__.startswith(_internals.FOREACH_PREFIX)
        # The positions and names of the arguments that may stay on the CPU, or None.
        names = _HOST_ARGUMENT_NAMES.get(name)
        positions = frozenset(position for position, arg in arguments if names and arg.name in names)
        self.host_positions, self.host_names = (positions, names) if positions else (None, None)
        self.any_device = func in _ANY_DEVICE
        kernel = _HOST_KERNELS.get(func)
        if kernel is None:
            # OpOverload.__call__ only forwards to _op: call the C++ entry point itself.
            kernel = _kernel_of(func) if type(func) is _OpOverload else func
        self.kernel = kernel
        self.aliases = _write_aliases(schema, arguments)
        self.reshapes = _reshaped_arguments(func, name, arguments)
        self.views = any(ret.alias_info is not None and not ret.alias_info.is_write for ret in schema.returns)
        # In-place operations (add_, zero_, ...) return their first argument itself.
        self.returns_first = self.aliases is not None and len(self.aliases) == 1 \
            and self.aliases[0] is not None and self.aliases[0][0] == 0
        # Operations that draw random numbers use the virtual GPU's generator (generators.py).
        self.seeded = _SEEDED is not None and _SEEDED in func.tags
        self.generator = next(((position, arg.name) for position, arg in arguments if arg.name == "generator"), None)
        # Operations that may make a quantized tensor (quantize_per_tensor, ...), which a
        # virtual GPU refuses: their results are checked (refuse_quantized).
        self.quantizes = "quantize" in name and "dequantize" not in name and "fake_quant" not in name
        # Storage arguments (set_, as torch.load rebuilds a tensor) may be a virtual GPU's.
        self.storages = tuple((position, arg.name) for position, arg in arguments if str(arg.type) == "Storage") or None
        self.tensor_positions = _single_tensor_positions(arguments) if (
            not self.foreach and self.host_positions is None and not self.any_device
            and not self.seeded and not self.quantizes and self.storages is None) else None


_SEEDED = getattr(torch.Tag, "nondeterministic_seeded", None)


def _single_tensor_positions(arguments):
    """Positions of the operator's `Tensor` and `Tensor?` arguments (`arguments`, enumerated),
    when those are the only arguments that can hold a tensor (no tensor lists) and none is
    keyword-only: then a call with positional arguments only can take `torch_dispatch`'s short
    path. Else None."""
    positions = []
    for position, arg in arguments:
        kind = str(arg.type)
        if "Tensor" not in kind:
            continue
        if kind not in ("Tensor", "Optional[Tensor]") or arg.kwarg_only:
            return None
        positions.append(position)
    return tuple(positions)


_alias = _kernel_of(_aten.alias.default)
_plans: dict = {}   # id(func) -> _Plan


def run(cls, func, args, kwargs):
    """Run ATen operation `func` on the host tensors behind `args` (`cls` instances are
    virtual tensors), with CUDA's device rules."""
    return torch_dispatch(cls, func, None, args, kwargs)


def torch_dispatch(cls, func, types, args=(), kwargs=None):
    """`run` with `__torch_dispatch__`'s signature: `VirtualTensor.__torch_dispatch__` is
    this function itself (a classmethod), one Python call less per operation."""
    if _multithreading_enabled():  # single_threaded_autograd(), inlined: this is the hot path
        _set_multithreading_enabled(False)
    plan = _plans.get(id(func))
    if plan is None or plan.func is not func:
        plan = _plans[id(func)] = _Plan(func)
    if plan.tensor_positions is not None and not kwargs:
        result = _short_path(cls, plan, args)
        if result is not _NOT_SHORT:
            return result
    return _general_path(cls, plan, args, kwargs if kwargs is not None else {})


_NOT_SHORT = object()  # what _short_path answers for a call it leaves to _general_path


def _short_path(cls, plan, args):
    """The path most operations take: positional arguments only, tensors only where the
    schema has a lone Tensor, each a virtual tensor (all on one device), a number (torch hands
    a wrapped one over as a Python number), a 0-dim CPU tensor or None. Anything else (a CPU
    tensor with dimensions, a mismatch, no virtual tensor at all) answers `_NOT_SHORT`, and
    the general path decides it, raises the mismatch, or wraps the results alike."""
    out = None
    host_args = list(args)
    count = len(args)
    for position in plan.tensor_positions:
        if position >= count:
            continue  # a trailing optional left out: nothing to unwrap (and no later ones)
        arg = args[position]
        if isinstance(arg, cls):
            device = arg._device
            if out is None:
                out = device
            elif device is not out and device != out:
                return _NOT_SHORT
            host_args[position] = arg._host
        elif isinstance(arg, _Tensor) and not (arg.is_cpu and arg.dim() == 0):
            return _NOT_SHORT
        # else None, a Python number, or a 0-dim CPU tensor (a number to CUDA): as it is
    if out is None:
        return _NOT_SHORT
    result = plan.kernel(*host_args)
    if plan.reshapes is not None:
        _follow_hosts(cls, plan.reshapes, args, {})
    # _finish's commonest cases, inlined
    if plan.aliases is None and not plan.views and isinstance(result, _Tensor):
        return new(cls, result, out)
    if plan.returns_first:
        return args[0]
    return _finish(cls, plan, result, host_args, out, args, {})


def _general_path(cls, plan, args, kwargs):
    """Any call: unwrap every argument, check CUDA's device rule, run the host kernel (with
    the virtual GPU's random generator where it draws), and wrap the results."""
    if plan.foreach:
        return _dispatch_foreach(cls, plan, args, kwargs)
    host_args, host_kwargs, seen = _unwrap_call(cls, plan, args, kwargs)
    if plan.storages is not None:
        _host_storages(plan.storages, host_args, host_kwargs)
    if seen and not plan.any_device:
        _check_one_device(plan, seen, args, kwargs)
    out = _result_device(host_kwargs, seen)
    if plan.seeded and out is not None:
        result = _random.run_seeded(plan, host_args, host_kwargs, out)
    else:
        result = plan.kernel(*host_args, **host_kwargs)
    if plan.reshapes is not None:
        _follow_hosts(cls, plan.reshapes, args, kwargs)
    if out is None:
        return result
    if plan.quantizes:
        _refuse_quantized(result, out)
    return _finish(cls, plan, result, host_args, out, args, kwargs)


def refuse_quantized(device) -> UnsupportedValueError:
    """The error for a quantized tensor on virtual GPU `device`."""
    return UnsupportedValueError(
        f"devshim's virtual GPUs hold no quantized tensors ({device} cannot keep one: torch's "
        f"quantized kernels and tensor internals take only their own devices' tensors). Quantize on "
        f"the CPU (move the tensor there first with t.cpu()), or keep the float tensor on {device} "
        f"and dequantize before moving it (x.dequantize())."
    )


def _refuse_quantized(result, device) -> None:
    values = result if type(result) is list or type(result) is tuple else (result,)
    for value in values:
        if isinstance(value, _Tensor) and value.is_quantized:
            raise refuse_quantized(device)


def _unwrap_call(cls, plan, args, kwargs):
    """`(host_args, host_kwargs, seen)`: the call with virtual tensors replaced by their host
    tensors, and the devices that must agree (see `_unwrap`)."""
    seen: list = []
    positions = plan.host_positions
    if positions is None:
        host_args = []
        for arg in args:  # _unwrap, with virtual tensors and plain values answered inline
            if isinstance(arg, cls):
                seen.append(arg._device)
                host_args.append(arg._host)
            elif isinstance(arg, _Tensor) or type(arg) is list or type(arg) is tuple:
                host_args.append(_unwrap(cls, arg, seen))
            else:
                host_args.append(arg)
        host_kwargs = {name: _unwrap(cls, value, seen) for name, value in kwargs.items()} if kwargs else {}
    else:
        names = plan.host_names
        host_args = [_unwrap(cls, arg, seen, i in positions) for i, arg in enumerate(args)]
        host_kwargs = {name: _unwrap(cls, value, seen, name in names) for name, value in kwargs.items()}
    return host_args, host_kwargs, seen


def _host_storages(where, host_args: list, host_kwargs: dict) -> None:
    """A virtual GPU's storage argument (torch.load made it) replaced by its host storage."""
    for position, name in where:
        if position < len(host_args):
            host_args[position] = _host_storage(host_args[position])
        elif name in host_kwargs:
            host_kwargs[name] = _host_storage(host_kwargs[name])


def _check_one_device(plan, seen: list, args, kwargs) -> None:
    """CUDA's rule: every tensor in `seen` on one device, else the error CUDA raises (or the
    operator's own, for those whose kernels check devices themselves)."""
    first = seen[0]
    for device in seen:
        if device is not first and device != first:
            own = _OWN_DEVICE_MESSAGES.get(plan.name)
            if own is not None:
                raise own(args, kwargs)
            raise _mismatch(plan.func, first, device)


def _result_device(host_kwargs, seen: list):
    """Where the result goes: `device=` when it names a virtual GPU (then the host kernel is
    asked for the CPU), else the virtual GPU of the inputs (every virtual tensor's device is in
    `seen`); None when the result stays where the kernel puts it."""
    asked = host_kwargs.get("device") if host_kwargs else None
    if asked is not None:
        target = _target(asked)
        if target.type == VIRTUAL_TYPE:
            host_kwargs["device"] = _CPU
            return target
        return None
    for device in seen:
        if device.type == VIRTUAL_TYPE:
            return device
    return None


def _finish(cls, plan, result, host_args, out, args, kwargs):
    """The host kernel's `result` as `torch_dispatch` returns it: tensors wrapped on virtual
    GPU `out`, mutated arguments (in-place and out= operations) as themselves."""
    aliases = plan.aliases
    if aliases is None:
        make = new_view if plan.views else new
        if isinstance(result, _Tensor):  # the commonest result: made here, not through _wrap
            if plan.views and any(result is host for host in host_args):
                result = _alias(result)  # lift_fresh gives its argument itself: a wrapper gets its own host
            return make(cls, result, out)
        return _wrap(cls, result, out, make)
    # In-place and out= operations return their (already updated) argument itself.
    returned = [_argument(args, kwargs, where) if where is not None else _wrap(cls, value, out)
                for where, value in zip(aliases, result if len(aliases) > 1 else (result,))]
    return returned[0] if len(aliases) == 1 else tuple(returned)


def _dispatch_foreach(cls, plan, args, kwargs):
    """`torch._foreach_*`: CUDA's rule holds per position (the i-th tensors of every list,
    and any single tensor argument, share a device), and each result lands on its position's device."""
    values = (*args, *kwargs.values())
    lists = [v for v in values if (type(v) is list or type(v) is tuple)
             and any(isinstance(item, _Tensor) for item in v)]
    singles = [v for v in values if isinstance(v, torch.Tensor)]
    places = []
    for position in range(len(lists[0]) if lists else 0):
        seen: list = []
        _unwrap(cls, [*(items[position] for items in lists), *singles], seen)
        if seen:
            _check_one_device(plan, seen, args, kwargs)
        places.append(next((device for device in seen if _is_virtual_type(device)), None))
    host_args, host_kwargs, _ = _unwrap_call(cls, plan, args, kwargs)  # (devices checked above, per position)
    result = plan.kernel(*host_args, **host_kwargs)
    if type(result) is list or type(result) is tuple:  # in-place forms return nothing
        return type(result)([new(cls, item, place) if place is not None else item
                             for item, place in zip(result, places)])
    return result


def _argument(args, kwargs, where):
    position, name = where
    return args[position] if position < len(args) else kwargs[name]


def _wrap(cls, value, device, make=new):
    if isinstance(value, _Tensor):
        return make(cls, value, device)
    if type(value) is list or type(value) is tuple:
        return type(value)([_wrap(cls, item, device, make) for item in value])
    return value


def _reshaped_arguments(func, name, arguments):
    """`(position, name)` of each argument whose metadata `func` may change in place (see
    `_RESHAPING`), or None for the (many) operations that change none."""
    written = [(position, arg.name) for position, arg in arguments
               if arg.alias_info is not None and arg.alias_info.is_write]
    if name in _RESHAPING:
        found = _RESHAPING[name]
        return (found,) if found is not None else (tuple(written) or None)
    if _INPLACE_VIEW is not None and _INPLACE_VIEW in func.tags:
        return tuple(written) or None
    outs = tuple((position, arg_name) for position, arg_name in written
                 if arguments[position][1].kwarg_only)  # out= (resized when its size differs)
    return outs or None


_INPLACE_VIEW = getattr(torch.Tag, "inplace_view", None)


def _follow_hosts(cls, where, args, kwargs) -> None:
    for position, name in where:
        value = args[position] if position < len(args) else kwargs.get(name)
        if isinstance(value, cls):
            follow_host(value)
        elif type(value) is list or type(value) is tuple:  # out= lists of tensors
            for item in value:
                if isinstance(item, cls):
                    follow_host(item)


def _write_aliases(schema, arguments):
    """For each return of the operator of `schema`: `(position, name)` of the argument it is
    (`a!`), or None; None for the whole when no return is a mutated argument (worked out once
    per operator: `_Plan` keeps the answer)."""
    found = []
    for ret in schema.returns:
        info = ret.alias_info
        where = None
        if info is not None and info.is_write:
            for position, arg in arguments:
                ainfo = arg.alias_info
                if ainfo is not None and ainfo.is_write and set(ainfo.before_set) & set(info.before_set):
                    where = (position, arg.name)
                    break
        found.append(where)
    return tuple(found) if any(where is not None for where in found) else None



def backend_kernel(cls, op, *args, **kwargs):
    """The PrivateUse1 kernel: factories asked for a virtual GPU run on the CPU; operations
    that arrive here with virtual tensors run as `__torch_dispatch__` would run them."""
    single_threaded_autograd()
    adopted = _adopt_foreign(cls, op, args, kwargs)
    if adopted is not None:
        return adopted
    if _has(cls, args) or _has(cls, kwargs.values()):
        return run(cls, op, args, kwargs)
    target = _target(kwargs.get("device") or VIRTUAL_TYPE)
    kwargs = dict(kwargs)
    kwargs["device"] = _CPU
    plan = _plans.get(id(op))
    if plan is None or plan.func is not op:
        plan = _plans[id(op)] = _Plan(op)
    result = _random.run_seeded(plan, list(args), kwargs, target) if plan.seeded else op(*args, **kwargs)
    return _wrap(cls, result, target)


def quantized_kernel(op, *args, **kwargs):
    """The QuantizedPrivateUse1 kernel: what would make a quantized tensor on a virtual GPU
    (`q.to("vgpu:0")`, `torch._empty_affine_quantized(..., device="vgpu:0")`) refuses."""
    device = kwargs.get("device")
    raise refuse_quantized(_target(device) if device is not None else VIRTUAL_TYPE)


def _adopt_foreign(cls, op, args, kwargs):
    """A call with tensors on a virtual GPU that are not devshim's wrappers: torch made them in
    C++ over memory devshim handed it (a DLPack capsule of a virtual tensor that torch imported,
    a storage a legacy-format `torch.load` fills), and they run as virtual tensors over that
    host memory; an in-place operation gives back the tensor itself. Any other such tensor has
    no memory devshim knows and is refused rather than computed with. None when there is none."""
    if not (_has(cls, args, True) or _has(cls, kwargs.values(), True)):
        return None
    originals: dict = {}
    adopted = tuple(_adopt(cls, value, originals) for value in args)
    result = run(cls, op, adopted, {name: _adopt(cls, value, originals) for name, value in kwargs.items()})
    if type(result) is tuple or type(result) is list:
        return type(result)(originals.get(id(item), item) for item in result)
    return originals.get(id(result), result)


def _is_foreign(cls, value) -> bool:
    return isinstance(value, _Tensor) and not isinstance(value, cls) and value.device.type == VIRTUAL_TYPE


def _adopt(cls, value, originals: dict):
    if type(value) is list or type(value) is tuple:
        return type(value)(_adopt(cls, item, originals) for item in value)
    if not _is_foreign(cls, value):
        return value
    storage = value.untyped_storage()
    memory = _host_storage(storage)
    if memory.device.type != "cpu":
        raise VirtualDLPackError(
            f"this {value.device} tensor ({type(value).__name__}) was not made by devshim's virtual "
            f"GPUs, so it holds no memory devshim can compute with (torch imported it from a DLPack "
            f"capsule devshim did not make, say). Move tensors between virtual GPUs and other "
            f"frameworks with ds.convert(t, ...) or t.cpu(), never through DLPack."
        )
    # Its storage may start inside the host storage (a capsule of a view points there): its host
    # gets a CPU storage starting at the same address, so storage offsets (as_strided) agree.
    start = storage.data_ptr()
    if start != memory.data_ptr():
        inside = _storage_at(start, _CPU, memory.nbytes() - (start - memory.data_ptr()))
        inside._devshim_keep = memory  # the memory lives as long as this view of it
        memory = inside
    host = torch.empty(0, dtype=value.dtype).set_(memory, value.storage_offset(), value.size(), value.stride())
    wrapper = new_view(cls, host, value.device)
    originals[id(wrapper)] = value
    return wrapper


def _block_diag_devices(args, kwargs) -> DeviceMismatchError:
    tensors = args[0] if args else kwargs["tensors"]
    first = tensors[0].device
    for index, tensor in enumerate(tensors):
        if tensor.device != first:
            return DeviceMismatchError(
                f"torch.block_diag: input tensors must all be on the same device. Input 0 is on "
                f"device {first} and input {index} is on device {tensor.device} (a devshim virtual "
                f"GPU refuses mixed devices as CUDA does: copy them to one device first)."
            )
    return DeviceMismatchError("torch.block_diag: input tensors must all be on the same device.")


# Operators whose kernels check devices themselves, with their own message (kept, as on CUDA).
_OWN_DEVICE_MESSAGES = {"block_diag": _block_diag_devices}

"""The transfer guard's hooks for JAX: its own guard in all three directions, and what it misses.

JAX has a transfer guard of its own (`jax.transfer_guard_host_to_device`,
`_device_to_host`, `_device_to_device`, thread-local). Every
`ds.transfer_guard` block sets them, in its thread, from the block's levels:
device to device and device to host always, host to device when JAX's default
device is an accelerator (real or virtual). devshim's hooks see first what
they can, so what they refuse raises devshim's errors and what they log is in
the report; JAX's guard is the backstop for the rest.

- **Device to host**: every host read of an array goes through one property of
  JAX's array class (`item` and `copy_to_host_async` aside), which devshim
  wraps, as it wraps `np.asarray`/`np.array`/`np.asanyarray` and gives the
  array class an `__array_ufunc__` while a guard checks (`ndarray + x` keeps
  JAX's meaning). JAX's own device-to-host guard never fires for CPU devices,
  where virtual GPUs live; devshim's hooks see GPUs and virtual GPUs alike. A
  value JAX already holds on the host is no transfer, as JAX's rule is (a value
  read to the host once is read again without one), whenever it was read: on a
  real device JAX itself says (its own guard, asked first, refuses only a read
  that copies), and for virtual GPUs devshim keeps the record JAX keeps for a
  real one, also of reads outside every guard (`watch_host_reads`, from the
  moment the JAX backend presents virtual GPUs).
- **Host to device**: JAX sends host values (NumPy arrays, Python numbers and
  index constants: `jnp.ones(1)`, `x + 1`, a jitted call on a NumPy argument)
  to devices in one Python step, `pxla.batched_device_put`, which devshim
  wraps: a value going to a GPU or virtual GPU is reported (`implicit`), one
  landing on the host CPU device moves nowhere. Calls JAX has seen before run in
  C++ (its jit "fast path"), with no Python step; so in a thread where a block
  checks host to device (and JAX has an accelerator, real or virtual) devshim
  sets a jit-cache key of its own and keeps JAX from making fast paths under it:
  every jitted call there takes the Python path. Nothing is retraced.
- **Device to device**: JAX's own guard (it fires for CPU devices too). Its
  refusals, raised from C++ as `JaxRuntimeError`, leave the block as devshim's
  errors (`JaxGuardHooks.translate`); a Python class cannot be made a base of
  JAX's, so inside the block they stay JAX's.

devshim's explicit calls are JAX's explicit transfers (`jax.device_put`,
`jax.device_get`), and its adapter runs them with JAX's guard relaxed while a
guard watches (jax issue 40285: an explicit `device_put` to the CPU refused).
"""

from __future__ import annotations

import dis
import re
import sys
import threading
import weakref
from contextlib import ExitStack

import jax
import numpy as np

from devshim import settings
from devshim._device import Device
from devshim.backends.jax import _internals
from devshim.backends.registry import load_backend
from devshim.errors import DeviceMismatchError, DevshimError, ImplicitTransferError
from devshim.guard import marker
from devshim.guard.hooks import GuardHooks, mark_wrapper, mixed_devices_refused
from devshim.guard.levels import ALLOW, DISALLOW, OP_INPUT, READ, TO_DEVICE
from devshim.guard.report import check, implicit, logged
from devshim.guard.state import current


class _NoArrayImpl:
    """Stands in for JAX's array class on a release that moved it: no value is one."""


# The private names, from the probes (`_internals`): found once, here, when the guard loads.
_VALUE = _internals.ARRAY_IMPL.get()  # Slot(ArrayImpl, "_value"): every host read goes through it
_ArrayImpl = _VALUE.owner if _VALUE is not None else _NoArrayImpl
_HOST_COPY = _internals.HOST_COPY.get() or "_devshim_no_host_copy"  # (then no array has one)
_JAX_REFUSAL = _internals.RUNTIME_ERROR.get()  # what JAX's own guard raises
_JAX_MARKS = _internals.GUARD_LIB.get()  # JAX's thread-local marks of its own explicit transfers
# What devshim's own host-to-device checks need from JAX: the jit-cache key, JAX's fast-path maker,
# its start-up flag and its one step sending host data to devices, and the marks above; all None
# when a release lacks one (its probe has warned, naming the fallback: JAX's own guard).
# The key is devshim's own: set (thread-locally) where devshim checks host-to-device,
# so jitted calls there miss the C++ fast paths made elsewhere and take JAX's Python path.
_PARTS = (_internals.CONFIG_EXT.get() or _internals.JIT_CONTEXT.get(), _internals.FASTPATH_DATA.get(),
          _internals.BACKENDS_INITIALIZED.get(), _internals.BATCHED_DEVICE_PUT.get(), _JAX_MARKS)
_CHECKING_KEY, _FASTPATH, _backends_are_initialized, _DEVICE_PUT = (
    _PARTS[:4] if all(part is not None for part in _PARTS) else (None,) * 4)

_READERS = {
    "__float__": "float(x)",
    "__int__": "int(x)",
    "__bool__": "bool(x)",
    "__complex__": "complex(x)",
    "__index__": "using x as an index",
    "tolist": "x.tolist()",
    "tobytes": "x.tobytes()",
    "item": "x.item()",
    "__array__": "np.asarray(x)",
    "__format__": "formatting x (f-string, str.format)",
    "__repr__": "print(x) / repr(x)",
    "__str__": "print(x) / str(x)",
    "__reduce__": "pickle.dumps(x)",
}
_EXPLICIT = _internals.DEVICE_GET_FRAMES.get() or {"device_get"}  # JAX's own explicit transfer to the host
_NUMPY_READERS = ("asarray", "array", "asanyarray")
# Bytecodes of operators: an __array_ufunc__ called while the caller runs one is NumPy's
# ndarray operator (ndarray + x), which deferred to JAX's reflected operator before.
_OPERATOR_CODES = {dis.opmap[name] for name in ("BINARY_OP", "COMPARE_OP") if name in dis.opmap}
_local = threading.local()
_fetched: dict = {}  # id(array) -> weakref, for arrays whose value devshim saw read (held on host)


def _explicit_in_jax() -> bool:
    """Whether JAX itself is making an explicit transfer in this thread (inside jax.device_put,
    which reads an array on the host to move it between backends, or jax.device_get)."""
    if _JAX_MARKS is None:
        return False
    marks = _JAX_MARKS.thread_local_state()
    return bool(marks.explicit_device_get or marks.explicit_device_put)


def _what(depth: int = 8):
    """How the read looks in the user's code, or None when JAX's device_get (or device_put) is
    making it."""
    if _explicit_in_jax():
        return None
    found = None
    for frame in _callers(depth):
        name = frame.f_code.co_name
        if name in _EXPLICIT:
            return None
        found = _READERS.get(name, found)
    return found or "reading x on the host"


def _callers(depth: int):
    """Up to `depth` frames, outwards from two frames above the function iterating this."""
    frame = sys._getframe(3)  # (1 up: the function iterating this generator)
    for _ in range(depth):
        if frame is None:
            return
        yield frame
        frame = frame.f_back


def _device_place(x):
    """The first device (not the host CPU) holding `x`, or None when it is all in host memory."""
    return _accelerator_among(x.sharding.device_set)


def _fetched_explicitly(x) -> bool:
    """Whether devshim remembers x's value as read to the host already (so held there)."""
    ref = _fetched.get(id(x))
    return ref is not None and ref() is x


def _remember_fetched(x, place) -> None:
    """x's value was read to the host (explicitly, or by a read devshim let through): it counts
    as held there from now on, as JAX's rule is. JAX keeps such a copy of a real device's array,
    but not always where devshim can see it (after copy_to_host_async, which jax.device_get
    starts with, the copy is held in C++ and _npy_value stays None); a virtual GPU is a CPU
    device, whose arrays JAX 0.10 and later keeps no host copy of at all."""
    if place is None:
        return
    key = id(x)
    try:
        _fetched[key] = weakref.ref(x, lambda _, key=key: _fetched.pop(key, None))
    except TypeError:
        pass


def _needs_report(x, state):
    """The device `x` would be read from, when this read is an implicit transfer; else None."""
    if not state.checking or marker.is_explicit() or state.device_to_host == ALLOW:
        return None
    if not isinstance(x, _ArrayImpl) or _fetched_explicitly(x):
        return None
    place = _device_place(x)
    # JAX's own host copy says a real device's value is held on the host. A virtual GPU is a
    # CPU device, whose arrays JAX before 0.10 keeps a host copy of on every read (from 0.10,
    # only of what it had to copy): for those devshim's own record (_fetched) decides.
    if place is not None and not place.virtual and getattr(x, _HOST_COPY, None) is not None:
        return None
    return place


def _held_on_host(place, fn, *args, **kwargs):
    """`(True, value)` when JAX reads `fn(*args)` without a transfer, else `(False, None)`.

    On a real device JAX's own device-to-host guard is the word: set to "disallow" it refuses
    a read only when the value has to be copied (JAX checks it where it copies: a value copied
    once, by a read or by `copy_to_host_async`, is held on the host, in C++ where devshim cannot
    see it). A virtual GPU is a CPU device, which JAX's guard never checks: there devshim's own
    record has decided already."""
    if place.virtual or _JAX_REFUSAL is None:
        return False, None
    try:
        with marker.explicit(), jax.transfer_guard_device_to_host(DISALLOW):
            return True, fn(*args, **kwargs)
    except _JAX_REFUSAL as refusal:
        if _REFUSED.search(str(refusal)) is None:
            raise  # not a transfer refused (a deleted array): the read fails as it would
        return False, None


def _read_checked(x, place, what, state, fn, *args, **kwargs):
    """Read `x` with `fn(*args)`, `place` being where its value is, as devshim's guard has it: no
    transfer when the value is held on the host already, else checked (refused or logged) as one,
    then remembered as held there. A checked read runs so that no hook (devshim's or JAX's)
    reports it again; under "log" it is recorded once the read was made (not when JAX refuses it:
    an array deleted, a read that fails)."""
    held, value = _held_on_host(place, fn, *args, **kwargs)
    if not held:
        pending = check("device_to_host", READ, what, place, Device("cpu"), state)
        with marker.explicit(), jax.transfer_guard_device_to_host(ALLOW):
            value = fn(*args, **kwargs)
        logged(pending)
    _remember_fetched(x, place)
    return value


def _guarded_value(original):
    getter = original.fget

    def _value(self):
        state = current()
        if state.checking:
            if marker.is_explicit():
                value = getter(self)  # (remembered once read: a read JAX refuses holds nothing)
                _remember_fetched(self, _device_place(self))
                return value
            place = _needs_report(self, state)
            if place is not None:
                what = _what()
                if what is None:  # jax.device_get: JAX's explicit transfer
                    _remember_fetched(self, place)
                    return getter(self)
                return _read_checked(self, place, what, state, getter, self)
        return getter(self)

    mark_wrapper(_value, getter)
    return property(_value, doc=original.__doc__)


def _guarded_read(original, what: str):
    """`original` (`x.item`, `np.asarray` and its kin) reading a JAX array `a`, checked as `what`."""

    def reader(a, *args, **kwargs):
        if type(a) is _ArrayImpl:
            state = current()
            place = _needs_report(a, state)
            if place is not None:
                return _read_checked(a, place, what, state, original, a, *args, **kwargs)
        return original(a, *args, **kwargs)

    reader.__name__ = reader.__qualname__ = original.__name__
    reader.__doc__ = original.__doc__
    return mark_wrapper(reader, original)


def _ndarray_operator(ufunc, method, inputs, kwargs, depth: int):
    """JAX's result for `ndarray + x` (its reflected operator ran there, on the device, before
    JAX arrays had an `__array_ufunc__`), or None when this ufunc call is no such operator;
    `depth` is how many frames up the caller of `__array_ufunc__` is."""
    if method != "__call__" or kwargs or len(inputs) != 2 or isinstance(inputs[0], _ArrayImpl):
        return None
    caller = sys._getframe(depth + 1)
    try:
        operator = caller.f_code.co_code[caller.f_lasti] in _OPERATOR_CODES
    except IndexError:
        operator = False
    return getattr(jax.numpy, ufunc.__name__)(*inputs) if operator else None


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    """NumPy ufuncs on JAX arrays while a guard checks: report the read, then do what NumPy did."""
    done = _ndarray_operator(ufunc, method, inputs, kwargs, 1)
    if done is not None:
        return done
    state = current()
    what = f"np.{ufunc.__name__}{'' if method == '__call__' else '.' + method}(x, ...)"
    arrays = list(inputs) + list(kwargs.get("out", ()) or ())
    getter = JaxGuardHooks.original(*_VALUE).fget
    pending, reported = None, []
    for a in arrays:
        place = _needs_report(a, state)
        if place is not None and not _held_on_host(place, getter, a)[0]:
            if pending is None:
                pending = check("device_to_host", READ, what, place, Device("cpu"), state)
            reported.append((a, place))
    with marker.explicit(), jax.transfer_guard_device_to_host(ALLOW):
        host = [getter(a) if isinstance(a, _ArrayImpl) else a for a in inputs]
    logged(pending)  # the values were read (whatever NumPy then makes of them)
    for a, place in reported:
        _remember_fetched(a, place)
    return getattr(ufunc, method)(*host, **kwargs)


def _guarded_copy_to_host_async(original):
    def copy_to_host_async(self):
        state = current()
        place = _needs_report(self, state)
        if place is not None and not _explicit_in_jax():  # jax.device_get starts its explicit copy with this
            result = _read_checked(self, place, "x.copy_to_host_async()", state, original, self)
        else:
            result = original(self)
        if state.checking:  # the value is on its way to the host: later reads are no transfer
            _remember_fetched(self, _device_place(self))
        return result

    return mark_wrapper(copy_to_host_async, original)


# ------------------------------------------------------------------ virtual GPUs: reads outside the guard

#: What devshim's record of reads on virtual GPUs replaced: (owner, name) -> what the owner held
#: there (JAX's own read functions, NumPy's readers). The record stays while the process runs.
_UNRECORDED: dict = {}


def _remember_if_virtual(a) -> None:
    """`a` read to the host: remembered as held there when it is an array on a virtual GPU."""
    if isinstance(a, _ArrayImpl):
        place = _device_place(a)
        if place is not None and place.virtual:
            _remember_fetched(a, place)


def _recording(read):
    """`read` (an array's value read, or its copy to the host started; NumPy's `np.asarray` and its
    kin, which read a CPU device's array through its buffer, past JAX's own read functions), then
    a JAX array read remembered."""

    def recorded(a, *args, **kwargs):
        value = read(a, *args, **kwargs)
        if type(a) is _ArrayImpl:
            _remember_if_virtual(a)
        return value

    recorded.__name__ = recorded.__qualname__ = getattr(read, "__name__", "read")
    recorded.__doc__ = read.__doc__
    return mark_wrapper(recorded, read)


def _recording_array_ufunc(self, ufunc, method, *inputs, **kwargs):
    """NumPy ufuncs on JAX arrays where virtual GPUs are presented and no guard checks: what
    NumPy did (its reading of each JAX input, then the ufunc on the host), each input remembered."""
    done = _ndarray_operator(ufunc, method, inputs, kwargs, 1)
    if done is not None:
        return done
    getter = _UNRECORDED[(_ArrayImpl, _VALUE.name)].fget
    host = [getter(a) if isinstance(a, _ArrayImpl) else a for a in inputs]
    for a in list(inputs) + list(kwargs.get("out", ()) or ()):
        _remember_if_virtual(a)
    return getattr(ufunc, method)(*host, **kwargs)


def watch_host_reads() -> None:
    """Keep JAX's rule on virtual GPUs outside every guard too: from now on, in this process, an
    array on a virtual GPU whose value is read to the host (`np.asarray(x)`, `np.add(x, 1)`,
    `float(x)`, `str(x)`, `pickle.dumps(x)`, `x.copy_to_host_async()`, ...), guarded or not, is
    remembered as held there, as JAX holds a real GPU's value after its first read: a guard that
    starts later reads it again without a transfer. A real GPU needs no such record (JAX's own
    guard says, `_held_on_host`). The JAX backend calls this when it presents virtual GPUs; its
    cost, a Python call around each host read of a JAX array (and NumPy's `asarray`, `array`,
    `asanyarray` and ufuncs on JAX arrays taking the guard's route), is paid in such processes
    only. Guard hooks installed now go back on over it.

    Example:
        >>> watch_host_reads()
        >>> np.asarray(x_on_virtual_gpu0)           # no guard: read, and remembered
        >>> with ds.transfer_guard("disallow"):
        ...     np.asarray(x_on_virtual_gpu0)       # held on the host: no transfer
    """
    if _VALUE is None or _UNRECORDED:
        return
    guarding = JaxGuardHooks.patched()
    if guarding:
        JaxGuardHooks.restore()  # JAX's and NumPy's own functions back: the record goes under the guard
    for owner, name in ((_ArrayImpl, _VALUE.name), (_ArrayImpl, "item"), (_ArrayImpl, "copy_to_host_async"),
                        (_ArrayImpl, "__array_ufunc__"), *((np, reader) for reader in _NUMPY_READERS)):
        own = vars(owner).get(name)
        _UNRECORDED[(owner, name)] = own
        if name == "__array_ufunc__":
            setattr(owner, name, _recording_array_ufunc)
        elif isinstance(own, property):
            setattr(owner, name, property(_recording(own.fget), doc=own.__doc__))
        elif own is not None:
            setattr(owner, name, _recording(own))
    if guarding:
        JaxGuardHooks().install()


# ------------------------------------------------------------------ host to device

# JAX's Python path of a jitted call (its local `fun` is the function), and the mark JAX puts on
# the functions that apply one primitive.
_JIT_FRAME = _internals.JIT_FRAME.get()
_PRIMITIVE_MARK = _internals.PRIMITIVE_MARK.get() or "_devshim_no_primitive_mark"


def _computation_name(depth: int = 16) -> str:
    """The jitted function (or primitive) JAX is sending host data to, from its Python frames."""
    for frame in _callers(depth):
        if frame.f_code.co_name == _JIT_FRAME:
            fun = frame.f_locals.get("fun")
            name = getattr(fun, "__qualname__", None) or getattr(fun, "__name__", None)
            if name:
                return name if getattr(fun, _PRIMITIVE_MARK, False) else f"jit({name})"
    return "a JAX computation"


def _accelerator_among(devices):
    """The first of JAX's `devices` that is not the host CPU (a GPU, real or virtual), or None."""
    backend = load_backend("jax")
    for native in devices:
        place = backend.describe(native)
        if place.kind != "cpu":
            return place
    return None


def _host_to_device_error(event) -> ImplicitTransferError:
    return ImplicitTransferError(
        f"{event.what}: an implicit host-to-device copy to {event.target}, refused "
        f"by ds.transfer_guard at {event.site}. JAX counts NumPy arrays, Python numbers and index "
        f"constants (x + 1, x[0], jnp.ones(1)) given to a computation on a device. Put the data "
        f"there explicitly first (ds.to_device(a, device) or jax.device_put(a, device)), or allow "
        f"these copies with ds.transfer_guard(host_to_device='allow')."
    )


_global_key: dict = {"pending": False}  # the process default's key: to decide ("pending"), set ("set")


def _settle_global_key() -> None:
    """Set devshim's jit-cache key for every thread when the process default checks host to
    device and JAX (running a computation now, so started) has an accelerator, real or virtual."""
    _global_key["pending"] = False
    if _has_accelerators():
        _CHECKING_KEY.set_global(True)
        _global_key["set"] = True


def _follow_default() -> None:
    """The process default (DEVSHIM_TRANSFER_GUARD) checks in every thread, outside blocks too:
    set devshim's jit-cache key for every thread while it checks host to device, from now on
    (JAX's fast paths made before are keyed without it). If JAX has not started yet, no fast
    path exists and asking for its devices would start it before devshim sets up virtual GPUs:
    decided at JAX's first dispatch through the hooks instead."""
    try:
        wanted = JaxGuardHooks.patched() and settings.default_guard_level() != ALLOW
    except DevshimError:  # a misspelt level: the lifecycle reports it
        wanted = False
    if not wanted:
        _drop_global_key()
    elif _backends_are_initialized():
        _settle_global_key()
    else:
        _global_key["pending"] = True


def _guarded_device_put(original):
    """JAX's one Python step that sends host values (NumPy arrays, numbers) to devices."""

    def batched_device_put(aval, sharding, xs, devices, *args, **kwargs):
        if _global_key["pending"]:
            _settle_global_key()
        state = current()
        if marker.is_explicit():  # devshim's own explicit call (split_batch's slicing): JAX's
            with jax.transfer_guard_host_to_device(ALLOW):  # backstop guard must not refuse it
                return original(aval, sharding, xs, devices, *args, **kwargs)
        if (state.host_to_device == ALLOW or not _CHECKING_KEY.value
                or _JAX_MARKS.thread_local_state().explicit_device_put
                or any(isinstance(x, _ArrayImpl) for x in xs)):  # JAX arrays: a copy between devices
            return original(aval, sharding, xs, devices, *args, **kwargs)
        target = _accelerator_among(devices)
        pending = None
        if target is not None:
            what = f"host data {aval.str_short()} into {_computation_name()}"
            pending = check("host_to_device", TO_DEVICE, what, Device("cpu"), target, state,
                            error=_host_to_device_error)
        # devshim has decided (host data to the host CPU moves nowhere): JAX's own guard, set
        # by the block as a backstop, must not decide again, nor log it a second time.
        with jax.transfer_guard_host_to_device(ALLOW):
            placed = original(aval, sharding, xs, devices, *args, **kwargs)
        logged(pending)  # under "log": once JAX has sent the data
        return placed

    return mark_wrapper(batched_device_put, original)


def _guarded_fastpath(original):
    """No C++ fast path is made for calls where devshim checks host-to-device: every call there
    takes JAX's Python path, where `batched_device_put` sees its host arguments."""

    def _get_fastpath_data(*args, **kwargs):
        if _global_key["pending"]:
            _settle_global_key()
        if _CHECKING_KEY.value:
            return None
        return original(*args, **kwargs)

    return mark_wrapper(_get_fastpath_data, original)


def _has_accelerators() -> bool:
    """Whether JAX has a device that is not the host CPU: a GPU or TPU, or a virtual GPU
    (host device 1, when devshim presents virtual GPUs). Without one host data cannot move."""
    if jax.default_backend() != "cpu":
        return True
    return _accelerator_among(jax.devices()[1:2]) is not None


def _drop_global_key() -> None:
    """No decision pending, and devshim's jit-cache key unset for every thread (where it was set)."""
    _global_key["pending"] = False
    if _global_key.pop("set", False):
        _CHECKING_KEY.set_global(None)


def _default_is_a_device() -> bool:
    """Whether host data JAX places by default goes to a device: its default device (this
    thread's `jax.default_device`, else the default backend's first device) is an accelerator,
    real or virtual. Host data going to the host CPU moves nowhere."""
    chosen = jax.config.jax_default_device
    if chosen is None:
        return jax.default_backend() != "cpu"
    if isinstance(chosen, str):
        return chosen.lower() != "cpu"
    try:
        return _accelerator_among((chosen,)) is not None
    except DevshimError:  # a device devshim does not describe: JAX's own word
        return getattr(chosen, "platform", "cpu") != "cpu"


_REFUSED = re.compile(r"Disallowed (host-to-device|device-to-host|device-to-device) transfer")
_JAX_DEVICE = re.compile(r"(?:^|[^_])sharding=\w+\(device=\w+\(id=(\d+)\)")
_JAX_TARGET = re.compile(r"dst_sharding=\w+\(device=\w+\(id=(\d+)\)")


def _jax_device(pattern, message: str, fallback):
    found = pattern.search(message)
    return fallback if found is None else _device_by_id(int(found.group(1)), fallback)


def _device_by_id(index: int, fallback, platform=None):
    """devshim's Device for JAX's device id `index` on `platform` ("CPU", "gpu"; None: the
    default backend's, then the host's), or `fallback` (another process's device). Ids are per
    platform: virtual GPUs are CPU devices, and on a GPU machine a CPU and a GPU share id 0."""
    for name in [platform.lower()] if platform else [None, "cpu"]:
        try:
            natives = jax.devices(name)
        except RuntimeError:  # no such platform here
            continue
        for native in natives:
            if native.id == index:
                try:
                    return load_backend("jax").describe(native)
                except DevshimError:
                    return fallback
    return fallback


# JAX's refusal to run one computation on arrays committed to different devices (a ValueError,
# raised whatever the guard's level), and the device ids its message names.
_INCOMPATIBLE = "Received incompatible devices for jitted computation"
_INCOMPATIBLE_PATTERN = re.compile(re.escape(_INCOMPATIBLE))
_DEVICE_IDS = re.compile(r"device ids \[([\d, ]+)\](?: on platform (\w+))?")


def _mixed_devices(error):
    """devshim's `DeviceMismatchError` for JAX refusing arrays on different devices, with
    JAX's message and the devices named as devshim names them (virtual GPUs included)."""
    message = str(error)
    if _INCOMPATIBLE not in message:
        return None
    ids = {(int(i), platform or None) for group, platform in _DEVICE_IDS.findall(message)
           for i in group.split(",") if i.strip()}
    places = sorted({str(_device_by_id(i, f"JAX device id {i}", platform)) for i, platform in ids})
    return mixed_devices_refused("JAX", error, ValueError, _INCOMPATIBLE_PATTERN,
                                 f" ({', '.join(places)})" if places else "")


class JaxGuardHooks(GuardHooks):
    """JAX's transfer-guard hooks (the contract: `devshim.guard.hooks.GuardHooks`).

    Example:
        >>> ds.backends.guard_hooks("jax").install()
    """

    def install(self) -> None:
        """Wrap JAX's host-read property, item(), NumPy's readers, give arrays __array_ufunc__,
        and hook JAX's Python path for host data going to devices."""
        if self.patched():
            return
        if _VALUE is not None:
            self.patch(*_VALUE, _guarded_value(_VALUE.own()))
            self.patch(_ArrayImpl, "item", _guarded_read(_ArrayImpl.item, "x.item()"))
            self.patch(_ArrayImpl, "__array_ufunc__", _array_ufunc)
            self.patch(_ArrayImpl, "copy_to_host_async",
                       _guarded_copy_to_host_async(_ArrayImpl.copy_to_host_async))
        if _CHECKING_KEY is not None:
            self.patch(*_DEVICE_PUT, _guarded_device_put(_DEVICE_PUT.current()))
            self.patch(*_FASTPATH, _guarded_fastpath(_FASTPATH.current()))
            _follow_default()
            settings.on_change(_follow_default)
        if _VALUE is not None:
            for name in _NUMPY_READERS:
                self.patch(np, name, _guarded_read(getattr(np, name), f"np.{name}(x)"))

    def uninstall(self) -> None:
        """Put JAX's and NumPy's own functions back."""
        patched = self.patched()
        self.restore()
        if patched:
            # (_fetched stays: a value read once is held on the host after the guard too, as in
            # JAX; an entry goes with its array)
            _drop_global_key()

    def enter_block(self, state) -> None:
        """Set JAX's own guards to this block's levels, in this thread (until `exit_block`)."""
        scopes = ExitStack()
        scopes.enter_context(jax.transfer_guard_device_to_device(state.device_to_device))
        scopes.enter_context(jax.transfer_guard_device_to_host(state.device_to_host))
        if _default_is_a_device():  # a backstop for what devshim's hook does not see (pmap, AOT calls)
            scopes.enter_context(jax.transfer_guard_host_to_device(state.host_to_device))
        if _CHECKING_KEY is not None and state.host_to_device != ALLOW and _has_accelerators():
            # devshim's jit-cache key, in this thread for this block
            scopes.callback(_CHECKING_KEY.set_local, _CHECKING_KEY.swap_local(True))
        vars(_local).setdefault("scopes", []).append(scopes)

    def exit_block(self) -> None:
        stack = getattr(_local, "scopes", None)
        if stack:
            stack.pop().close()

    def translate(self, error):
        """devshim's error for JAX's own guard refusing a transfer, recorded like devshim's own;
        or for JAX refusing to mix devices (`DeviceMismatchError`, whatever the level)."""
        if isinstance(error, ValueError) and not isinstance(error, DevshimError):
            return _mixed_devices(error)
        if _JAX_REFUSAL is None or not isinstance(error, _JAX_REFUSAL):
            return None
        message = str(error)
        refused = _REFUSED.search(message)
        if refused is None:
            return None
        direction = refused.group(1).replace("-", "_")
        source = Device("cpu") if direction == "host_to_device" else _jax_device(_JAX_DEVICE, message, "a device")
        target = Device("cpu") if direction == "device_to_host" else _jax_device(_JAX_TARGET, message, "a device")
        kind = {"host_to_device": TO_DEVICE, "device_to_host": READ}.get(direction, OP_INPUT)
        jax_says = message.split(": ", 1)[-1]

        def refusal(event):
            cls = DeviceMismatchError if direction == "device_to_device" else ImplicitTransferError
            return cls(
                f"JAX's own transfer guard, set by ds.transfer_guard, refused an implicit "
                f"{refused.group(1)} copy from {event.source} to {event.target} inside the block "
                f"ending at {event.site} ({jax_says}). Make the copy explicit (ds.to_device, "
                f"ds.copy_if_needed, ds.to_numpy, or jax.device_put / jax.device_get), or allow it "
                f"with ds.transfer_guard({direction}='allow')."
            )

        state = current()
        if state.level(direction) != DISALLOW:
            return None  # devshim's level lets it through: JAX's guard was set by someone else
        try:
            implicit(direction, kind, f"JAX: {jax_says}", source, target, state, error=refusal)
        except DevshimError as translated:
            return translated
        return None

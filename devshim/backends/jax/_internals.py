"""The private JAX names the jax backend uses, each behind a probe (`devshim.backends.probes`).

`interop.py` and `model.py` use JAX's public API only; `core.py` asks one probe here
(`DISTRIBUTED_STATE`: whether `jax.distributed` started, on JAX before
`jax.distributed.is_initialized`). Every other private name is the transfer guard's
(`guard.py`), which asks these probes and names none itself. Where JAX
spells one differently across the tested releases (0.4.31 to 0.12), the probe finds each
spelling and the guard gets one object:

- the guard's jit-cache key: `config_ext.Config(name, value, include_in_jit_key=True)` from
  0.10, `config_ext.Config(value, include_in_jit_key=True)` in 0.4.36 to 0.9; JAX 0.4.31 to
  0.4.35 have no `config_ext`: there the key is one more field in JAX's own jit context
  (`jax_jit`'s `extra_jit_context`), which the C++ jit cache compares as it compares JAX's
  fields;
- JAX's thread-local marks of explicit transfers: `jax._src.lib.guard_lib` from 0.7,
  `jax._src.config.transfer_guard_lib` before;
- the error JAX's own guard raises: `jax.errors.JaxRuntimeError` from 0.4.32 (public), its
  older name `XlaRuntimeError` (`jax._src.lib.xla_client`) before;
- the frame of a jitted call's Python path: `pjit._run_python_pjit` from 0.10,
  `pjit._python_pjit_helper` before.

Measured: JAX 0.4.31, 0.7.2, 0.10.2 and 0.12.0.1 have each name in one of these spellings, and
the sweep (tools/version_sweep.py) runs every minor release between; `config_ext` and the
jit context's own field were looked up on each of 0.4.33 to 0.4.38 (the field until 0.4.35,
`config_ext` from 0.4.36).
"""

from __future__ import annotations

import inspect
import threading
from collections import namedtuple

from devshim.backends.probes import Internals, Slot, dotted, names_in_code, slot

#: The JAX releases devshim's CI tests (tox envs jax-floor, jax and py313-latest).
TESTED = "0.4.31 to 0.12"

INTERNALS = Internals("jax", title="JAX", tested=TESTED)

_H2D = "the transfer guard's own host-to-device checks (counted, refused as ImplicitTransferError)"
_H2D_FALLBACK = ("the guard leaves host-to-device transfers to JAX's own transfer guard, which refuses "
                 "them (as ImplicitTransferError) or logs them to stderr, but does not count them in the "
                 "report, and is set only while JAX's default device is an accelerator.")
_KEY_NAME = "devshim_host_to_device_guard"
# The first JAX with config_ext, which holds devshim's jit-cache key; before it, the key is a field
# of JAX's own jit context (0.4.35 has _ThreadLocalExtraJitContext, 0.4.36 and 0.5.3 do not).
_CONFIG_EXT_SINCE = (0, 4, 36)


def _array_value():
    from jax._src import array

    if not isinstance(vars(array.ArrayImpl)["_value"], property):
        raise TypeError("jax._src.array.ArrayImpl._value is no longer a property")
    return Slot(array.ArrayImpl, "_value")  # the reading property devshim wraps


def _host_copy():
    from jax._src import array

    if "_npy_value" not in getattr(array.ArrayImpl, "__annotations__", {}):
        raise AttributeError("jax._src.array.ArrayImpl no longer declares _npy_value")
    return "_npy_value"  # where JAX keeps an array's value once it has it on the host


def _config_ext_key():
    """devshim's jit-cache key as a JAX config of its own (JAX 0.4.36 and later)."""
    from jax._src import config

    config_class = config.config_ext.Config
    try:
        key = config_class(_KEY_NAME, None, include_in_jit_key=True)  # JAX 0.10 and later
    except TypeError:
        key = config_class(None, include_in_jit_key=True)  # JAX 0.4.36 to 0.9: no name
    for method in ("swap_local", "set_local", "set_global", "value"):
        getattr(key, method)
    return key


class _ContextFieldKey:
    """devshim's jit-cache key on JAX before 0.4.36: JAX's C++ jit cache compares the jit contexts
    (`jax_jit`'s thread-local and global `extra_jit_context`, named tuples); while the key is
    set, devshim's context is the same tuple with one more field, so calls under it never meet
    the fast paths made without it. JAX's own updates (`context._replace(...)`) keep the field.
    The same methods as `config_ext.Config`: `value`, `swap_local`, `set_local`, `set_global`."""

    def __init__(self, jax_jit, local_type, global_type) -> None:
        self._jax_jit = jax_jit
        self._plain = {"local": local_type, "global": global_type}
        self._keyed = {kind: namedtuple(f"Devshim{plain.__name__}", plain._fields + (_KEY_NAME,))
                       for kind, plain in self._plain.items()}
        self._local = threading.local()
        self._global = None

    @property
    def value(self):
        found = getattr(self._local, "value", None)
        return found if found is not None else self._global

    def swap_local(self, value):
        previous = getattr(self._local, "value", None)
        self.set_local(value)
        return previous

    def set_local(self, value) -> None:
        self._local.value = value
        self._write(self._jax_jit.thread_local_state(), "local", value)

    def set_global(self, value) -> None:
        self._global = value
        self._write(self._jax_jit.global_state(), "global", value)

    def _write(self, state, kind: str, value) -> None:
        plain = self._plain[kind]
        context = state.extra_jit_context or plain()
        fields = tuple(context)[:len(plain._fields)]
        state.extra_jit_context = plain(*fields) if value is None else self._keyed[kind](*fields, value)


def _context_field_key():
    from jax._src import config
    from jax._src.lib import jax_jit

    for state in (jax_jit.thread_local_state(), jax_jit.global_state()):
        state.extra_jit_context  # noqa: B018 - the contexts the C++ jit cache compares
    return _ContextFieldKey(jax_jit, config._ThreadLocalExtraJitContext, config._GlobalExtraJitContext)


def _guard_lib():
    try:
        from jax._src.lib import guard_lib  # JAX 0.7 and later
    except ImportError:
        from jax._src.config import transfer_guard_lib as guard_lib
    state = guard_lib.thread_local_state()
    state.explicit_device_put, state.explicit_device_get  # noqa: B018 - JAX's marks of explicit transfers
    return guard_lib


def _runtime_error():
    import jax

    found = getattr(jax.errors, "JaxRuntimeError", None)  # public from JAX 0.4.32
    if found is None:
        from jax._src.lib import xla_client

        found = xla_client.XlaRuntimeError
    return found


def _jit_frame():
    from jax._src import pjit

    for name in ("_run_python_pjit", "_python_pjit_helper"):  # JAX 0.10 and later; before
        function = getattr(pjit, name, None)
        if function is not None and "fun" in function.__code__.co_varnames:
            return name
    raise AttributeError("jax._src.pjit has neither _run_python_pjit nor _python_pjit_helper taking `fun`")


def _primitive_mark():
    from jax._src import dispatch

    for value in vars(dispatch).values():
        code = getattr(inspect.unwrap(value), "__code__", None) if callable(value) else None
        if code is not None and "_apply_primitive" in names_in_code(code):
            return "_apply_primitive"
    raise AttributeError("jax._src.dispatch marks no function _apply_primitive")


def _distributed_state():
    """Whether `jax.distributed.initialize` has run, as a function: on JAX 0.4.31 (JAX 0.7 has
    the public `jax.distributed.is_initialized`), its client in JAX's distributed state."""
    from jax._src import distributed

    state = distributed.global_state
    state.client  # noqa: B018 - set by jax.distributed.initialize, None before and after shutdown
    return lambda: state.client is not None


def _device_get_frames():
    from jax._src import api

    api.device_get, api._device_get  # noqa: B018 - the frames of JAX's explicit host transfer
    return frozenset(("device_get", "_device_get"))


def _guard_probe(name: str, feature: str, fallback: str, find, **versions):
    """One of the names the transfer guard needs, `feature` telling what for."""
    return INTERNALS.add(name, feature=f"the transfer guard{feature}", fallback=fallback, find=find, **versions)


def _keras(name: str, feature: str, fallback: str):
    """A Keras 3 name the model placement needs when Keras runs on JAX, `feature` telling what for."""
    return INTERNALS.add(name, feature=feature, fallback=fallback, find=dotted(name), framework="keras", since=(3, 0))


ARRAY_IMPL = _guard_probe("jax._src.array.ArrayImpl._value",
                          "'s checks of device-to-host reads (float(x), np.asarray(x))",
                          "reads from a device are left to JAX's own transfer guard (not counted in the report; "
                          "JAX's guard does not see reads from CPU devices, where virtual GPUs live).", _array_value)
HOST_COPY = _guard_probe("jax._src.array.ArrayImpl._npy_value",
                         " telling a value JAX already holds on the host (after jax.device_get) "
                         "from a new device-to-host read",
                         "every host read of an array on a device is reported, also of one JAX holds on the host.",
                         _host_copy)


def _host_to_device(name: str, feature: str, find, **versions):
    """One of the names the guard's own host-to-device checks need, `feature` telling what for."""
    return INTERNALS.add(name, feature=_H2D + feature, fallback=_H2D_FALLBACK, find=find, **versions)


CONFIG_EXT = _host_to_device("jax._src.config.config_ext.Config", " in jitted calls (devshim's jit-cache key)",
                             _config_ext_key, since=_CONFIG_EXT_SINCE)
JIT_CONTEXT = _host_to_device("jax._src.lib.jax_jit extra_jit_context",
                              " in jitted calls, on JAX before 0.4.36 (devshim's jit-cache key)",
                              _context_field_key, before=_CONFIG_EXT_SINCE)
FASTPATH_DATA = _host_to_device("jax._src.pjit._get_fastpath_data", " in jitted calls",
                                slot("jax._src.pjit._get_fastpath_data"))
BACKENDS_INITIALIZED = _host_to_device("jax._src.xla_bridge.backends_are_initialized", "",
                                       dotted("jax._src.xla_bridge.backends_are_initialized"))
BATCHED_DEVICE_PUT = _host_to_device("jax._src.interpreters.pxla.batched_device_put", "",
                                     slot("jax._src.interpreters.pxla.batched_device_put"))
GUARD_LIB = _host_to_device("jax._src.lib.guard_lib.thread_local_state",
                            ", telling jax.device_put and jax.device_get from implicit transfers", _guard_lib)


RUNTIME_ERROR = _guard_probe("jax.errors.JaxRuntimeError",
                             " turning JAX's own guard's refusals into devshim's errors "
                             "(ImplicitTransferError, DeviceMismatchError)",
                             "JAX's refusals leave a guard block as JAX raised them.", _runtime_error)
JIT_FRAME = _guard_probe("jax._src.pjit._run_python_pjit",
                         " naming the jitted function host data goes to (\"into jit(f)\")",
                         "the report says \"into a JAX computation\".", _jit_frame)
PRIMITIVE_MARK = _guard_probe("jax._src.dispatch prim_fun._apply_primitive",
                              " naming the primitive host data goes to (\"into broadcast_in_dim\")",
                              "the report names it like a jitted function (\"into jit(broadcast_in_dim)\").",
                              _primitive_mark, since=(0, 7))
DISTRIBUTED_STATE = INTERNALS.add(
    "jax._src.distributed.global_state.client",
    feature="ds.process_info seeing processes started by jax.distributed.initialize alone (no launcher "
            "variables) on JAX before jax.distributed.is_initialized",
    fallback="ds.process_info sees the launcher's variables only: each process takes rank 0 and GPU 0.",
    find=_distributed_state,
    before=(0, 7),  # JAX 0.7.2 has jax.distributed.is_initialized (measured)
)
DEVICE_GET_FRAMES = _guard_probe("jax._src.api._device_get",
                                 " telling jax.device_get (an explicit read) from an implicit one",
                                 "the guard finds jax.device_get by its public name only, a few frames up.",
                                 _device_get_frames)

KERAS_MAYBE_BUILD = _keras("keras.layers.Layer._maybe_build",
                           "ds.place_model of an unbuilt Keras model, built on its first call under the device, "
                           "when Keras runs on JAX",
                           "only the model's build() and call() run under the device (a subclassed model's weights, "
                           "made after Keras traces its call(), land on Keras's default device): pass input_shape= "
                           "to ds.place_model to build it there at once.")
KERAS_FUNCTIONAL = _keras("keras.src.models.functional.Functional",
                          "ds.replicate cloning functional Keras models (keras.Model(inputs, outputs)) when Keras "
                          "runs on JAX",
                          "functional models are refused like subclassed ones (UnsupportedPlacementError); "
                          "keras.Sequential models are still cloned.")

__all__ = ["INTERNALS", "TESTED", "ARRAY_IMPL", "HOST_COPY", "CONFIG_EXT", "JIT_CONTEXT", "FASTPATH_DATA",
           "BACKENDS_INITIALIZED", "BATCHED_DEVICE_PUT", "GUARD_LIB", "RUNTIME_ERROR", "JIT_FRAME",
           "PRIMITIVE_MARK", "DISTRIBUTED_STATE", "DEVICE_GET_FRAMES", "KERAS_FUNCTIONAL", "KERAS_MAYBE_BUILD"]

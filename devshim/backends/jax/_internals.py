"""The private JAX names the jax backend uses, each behind a probe (``devshim.backends.probes``).

``core.py``, ``interop.py`` and ``model.py`` use JAX's public API only. Every private name
is in ``guard.py``, the transfer guard's host-to-device checks, which still imports them
itself; the probes below declare them now, so that their canary tests
(``tests/test_internals.py``) fail in CI the day a JAX release moves one. Round two of
issue 27 makes ``guard.py`` ask these probes. Measured: JAX 0.4.31 lacks ``config_ext`` and
``guard_lib`` (and ``jax.errors.JaxRuntimeError``, whose older name is ``XlaRuntimeError``);
0.7.2 has them, with ``config_ext.Config(value, include_in_jit_key=...)`` taking no name.

To move here in round two (issue 27; still used where they are):

========  ====  ==========================================================  =====================
file      line  name                                                        feature
========  ====  ==========================================================  =====================
guard.py  48    jax._src.array (ArrayImpl; its ``_value``, wrapped)         guard: reads
guard.py  61    jax._src.config (config_ext.Config, a jit-cache key)        guard: jitted calls
guard.py  62    jax._src.pjit._get_fastpath_data (wrapped)                  guard: jitted calls
guard.py  63    jax._src.xla_bridge.backends_are_initialized                guard: host-to-device
guard.py  64    jax._src.interpreters.pxla.batched_device_put (wrapped)     guard: host-to-device
guard.py  65    jax._src.lib.guard_lib.thread_local_state                   guard: explicit marks
guard.py  502   jax.errors.JaxRuntimeError (public, 0.4.32 and later)       guard: error translation
========  ====  ==========================================================  =====================
"""

from __future__ import annotations

from devshim.backends.probes import Internals

#: The JAX releases devshim's CI tests (tox envs jax-floor, jax and jax-latest).
TESTED = "0.4.31 to 0.12"

INTERNALS = Internals("jax", title="JAX", tested=TESTED)

_GUARD = "the transfer guard's own host-to-device checks (counted, translated to ImplicitTransferError)"
_GUARD_FALLBACK = ("the guard leaves host-to-device transfers to JAX's own transfer guard, which refuses "
                   "or logs them but does not count them in the report.")


def _array_value():
    from jax._src import array

    array.ArrayImpl._value  # noqa: B018 - the reading property devshim wraps
    return array.ArrayImpl


def _config_ext():
    from jax._src import config

    return config.config_ext.Config


def _fastpath_data():
    from jax._src import pjit

    return pjit._get_fastpath_data


def _backends_initialized():
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized


def _batched_device_put():
    from jax._src.interpreters import pxla

    return pxla.batched_device_put


def _guard_lib():
    from jax._src.lib import guard_lib

    guard_lib.thread_local_state  # noqa: B018 - where JAX keeps its explicit-transfer marks
    return guard_lib


ARRAY_IMPL = INTERNALS.add(
    "jax._src.array.ArrayImpl._value",
    feature="the transfer guard's checks of device-to-host reads (float(x), np.asarray(x))",
    fallback="reads from a device are left to JAX's own transfer guard (not counted in the report).",
    find=_array_value,
)
CONFIG_EXT = INTERNALS.add(
    "jax._src.config.config_ext.Config",
    feature=_GUARD + " in jitted calls",
    fallback=_GUARD_FALLBACK,
    find=_config_ext,
    since=(0, 7),
)
FASTPATH_DATA = INTERNALS.add(
    "jax._src.pjit._get_fastpath_data",
    feature=_GUARD + " in jitted calls",
    fallback=_GUARD_FALLBACK,
    find=_fastpath_data,
)
BACKENDS_INITIALIZED = INTERNALS.add(
    "jax._src.xla_bridge.backends_are_initialized",
    feature=_GUARD,
    fallback=_GUARD_FALLBACK,
    find=_backends_initialized,
)
BATCHED_DEVICE_PUT = INTERNALS.add(
    "jax._src.interpreters.pxla.batched_device_put",
    feature=_GUARD,
    fallback=_GUARD_FALLBACK,
    find=_batched_device_put,
)
GUARD_LIB = INTERNALS.add(
    "jax._src.lib.guard_lib.thread_local_state",
    feature=_GUARD + ", telling jax.device_put from an implicit transfer",
    fallback=_GUARD_FALLBACK,
    find=_guard_lib,
    since=(0, 7),
)

__all__ = ["INTERNALS", "TESTED", "ARRAY_IMPL", "CONFIG_EXT", "FASTPATH_DATA", "BACKENDS_INITIALIZED",
           "BATCHED_DEVICE_PUT", "GUARD_LIB"]

"""JAX's device contract.

Native devices are `jax.Device` objects, so `jax.device_put(x, ds.try_gpu())`
works. "gpu" is JAX's accelerator: the devices of its default backend when that
is not the CPU (CUDA or ROCm GPUs, TPUs), counted with `jax.local_devices`,
which never raises for a missing platform. JAX has no data-less device.

Arrays are `jax.Array`: single-device arrays, arrays sharded or replicated over
several devices, and tracers (the values `jax.jit`, `jax.grad` and `vmap`
trace). What devshim answers for each:

- a single-device array lives on its device (`x.sharding`'s one device);
- an array spread over several devices (sharded or replicated) has no one device:
  `device_of` returns its `Sharding` (what `x.device` and array-api-compat's
  `device(x)` answer, and what `jax.device_put` and `jnp`'s `device=` take),
  `neutral_device` raises `MultiDeviceValueError` naming the devices. A
  `Sharding` is a target too: `to_device(x, sharding)` is
  `jax.device_put(x, sharding)` in new storage, and `copy_if_needed` keeps an
  array already placed as the sharding says; `to_device(x, device)` gathers a
  spread array onto one device;
- a tracer has no device until the traced function runs: `device_of` answers
  None (as array-api-compat's `device(x)`), which `to_device` and
  `copy_if_needed` take there as `jax.device_put(t, None)` does (and refuse
  for a concrete array); `neutral_device` and
  `to_numpy` raise `UnplacedTensorError`; `to_device` and `copy_if_needed`
  record a `jax.device_put` in the trace, so gradients flow through them. Under
  `grad` alone it runs eagerly and moves the value; inside `jit` the compiled
  computation decides where its outputs land (JAX 0.10 keeps them on the
  computation's device), so move the outputs after the jitted call.

`to_device` is `jax.device_put(x, device, may_alias=False)`: new storage even
on the array's own device, where a plain `device_put` hands the same buffer back.
Where `may_alias=False` hands it back too (JAX 0.4.34 to 0.5.3), or JAX lacks it,
the array is copied with `jnp.array(..., copy=True)` on its new device.

Virtual devices follow `devshim.backends.virtual`: with
`DEVSHIM_VIRTUAL_DEVICES=N` JAX gets N + 1 host (CPU) devices before it
initialises its backends (`jax_num_cpu_devices`, or `XLA_FLAGS` on JAX
without that option); host device 0 stays the CPU and virtual `gpu:i` is host
device `i + 1`. XLA's CPU compiler is also asked, then, to keep every operation in
its own code (`_in_xla_own_code`), so that a step's memory there is what XLA counts,
as on a GPU.

JAX waits per value (`block_until_ready`): it has no call that waits for a device.
"""

from __future__ import annotations

import os
from _thread import allocate_lock  # threading's own lock, without its import cost
from contextlib import nullcontext
from functools import cached_property

from devshim import settings
from devshim.backends import probes, virtual
from devshim.backends.base import Backend, DeviceTable
from devshim.backends.jax import SPEC, _internals
from devshim.guard import marker
from devshim._device import Device
from devshim.errors import (
    BackendError, DatalessTensorError, DeviceUnavailableError, InvalidDeviceError, MultiDeviceValueError,
    UnplacedTensorError, UnsupportedDtypeError,
)

_HOST_COUNT_FLAG = "--xla_force_host_platform_device_count"

#: XLA's CPU compiler hands some operations to kernel libraries, oneDNN's convolutions and
#: matrix products on JAX 0.4.31 (these passes) and YNNPACK's fusions from 0.9 (this flag), and
#: a library's own scratch is outside XLA's count of a program's memory, where a GPU's
#: convolution workspace is inside it. Measured on the tests' small CNN with Adam at batch 512
#: (the process's resident peak over XLA's count): 1.13 on 0.4.31, 1.12 on 0.9.2, 1.19 on
#: 0.10.2, 1.16 on 0.11.2 and 1.04 on 0.12.0.1 as released; 1.03 on each with these off, as
#: on 0.4.38 to 0.8.3, whose CPU programs use no library there; the step as fast.
_LIBRARY_PASSES = ("onednn-convolution-rewriter", "onednn-matmul-rewriter", "onednn-ops-rewriter")
_DISABLED_PASSES = "--xla_disable_hlo_passes="  # names a release lacks are ignored
_YNNPACK_OFF = "--xla_cpu_experimental_ynn_fusion_type="  # no operation handed to YNNPACK
#: The releases whose XLA knows the YNNPACK flag (from jaxlib 0.8.1; the newest tested has it):
#: XLA stops the process on a flag it does not know, so a newer release goes without it (its
#: estimates then name the operations they do not count) until it is tested here.
_YNNPACK_FLAG_RELEASES = ((0, 8, 1), (0, 13))


class JaxBackend(Backend):
    """JAX arrays on the host CPU, the accelerator (GPU or TPU), or virtual host devices.

    Example:
        >>> with ds.use_backend("jax"):
        ...     x = jax.device_put(jnp.ones((2, 3)), ds.try_gpu())
    """

    spec = SPEC
    # Measured (jax 0.10.2, 2 cores): 1000 virtual GPUs answer in 0.7 s, 4000 in 1.0 s, 16000
    # in 28 s, 32000 in 89 s (setting up host devices grows faster than linearly).
    max_virtual_devices = 4096
    virtual_limit_reason = (" (JAX's host-device setup grows faster than linearly: 4000 take "
                            "about a second, 16000 half a minute)")
    waits_per_value = True

    def __init__(self) -> None:
        super().__init__()
        self._lock = allocate_lock()
        self._virtual = 0  # virtual GPUs presented now (host devices 1..N)
        self._described = DeviceTable("sharding")  # a single-device sharding -> Device
        self._by_device: dict = {}  # jax.Device -> Device
        self._single: dict = {}  # jax.Device -> its SingleDeviceSharding (a Sharding -> itself), for same_place
        self._default_set = None  # the default device devshim gave JAX (virtual gpu:0), if any

    def reset(self) -> None:
        super().reset()
        self._by_device.clear()
        self._virtual = 0  # re-read from settings at the next use (runtime)
        if self._default_set is not None:
            self._follow_default_device()  # JAX's default device is the CPU again until then

    # ------------------------------------------------------------ device lists

    @cached_property
    def _cpu_devices(self) -> tuple:
        """This process's CPU devices, read once: JAX fixes them when it initialises."""
        try:
            return tuple(self.fw.local_devices(backend="cpu"))
        except RuntimeError as err:
            raise DeviceUnavailableError(
                f"JAX has no CPU backend in this process ({err}). JAX_PLATFORMS="
                f"{os.environ.get('JAX_PLATFORMS', '(unset)')!r} probably leaves it out; add "
                f"'cpu' to it, e.g. JAX_PLATFORMS=cuda,cpu."
            ) from None

    @cached_property
    def _accelerator_devices(self) -> tuple:
        """The devices of JAX's default backend when that is not the CPU, read once."""
        jax = self.fw
        try:  # (a RuntimeError: JAX_PLATFORMS names a platform that failed to start)
            platform = jax.default_backend()
            return () if platform == "cpu" else tuple(jax.local_devices(backend=platform))
        except RuntimeError:
            return ()

    def accelerator_count(self) -> int:
        self.runtime()
        return len(self._accelerator_devices)

    def launch(self):
        """The launcher's variables, or else `jax.distributed` started with several processes:
        rank `jax.process_index()` of `jax.process_count()`. JAX does not say how many of them
        share this machine, so the local rank is the process index too (right on one machine; on
        several, each process's `local_device_ids`, or a launcher, give it its device)."""
        found = settings.launcher()
        if found is not None or not self.is_loaded():
            return found
        jax = self.fw
        is_initialized = getattr(jax.distributed, "is_initialized", None) or _internals.DISTRIBUTED_STATE.get()
        if is_initialized is None or not is_initialized():
            return None
        self.runtime()  # virtual GPUs asked for are set up before process_count starts JAX's backends
        count = jax.process_count()
        if count < 2:
            return None
        index = jax.process_index()
        return settings.Launch("jax.distributed", index, index, count, None, "jax.process_index()")

    def visibility_narrowed(self) -> bool:
        # Once jax.distributed.initialize has run, JAX gave each process its devices (its
        # local_device_ids: one per process under Slurm and Open MPI), so sharing is JAX's choice.
        return self.fw.process_count() > 1

    def find_platform(self):
        """"cuda", "rocm" or "tpu" (a plug-in's own name otherwise), or None without one."""
        self.runtime()
        found = self._accelerator_devices
        return _platform_name(found[0]) if found else None

    # ------------------------------------------------------------ primitives

    def is_tensor(self, x) -> bool:
        return isinstance(x, self.fw.Array)  # tracers are jax.Array instances too

    def is_tensor_type(self, kind: type):
        # True for array classes; None otherwise: jax.Array's isinstance check says more than its
        # issubclass (tracers).
        return True if issubclass(kind, self.fw.Array) else None

    def is_native_device(self, obj) -> bool:
        return isinstance(obj, self.fw.Device)

    def make_native_device(self, kind: str, index: int):
        self.runtime()
        if kind == "meta":
            raise self._no_meta()
        if kind == "cpu":
            return self._cpu_devices[index]
        if self._virtual:
            return self._cpu_devices[virtual.host_index(index)]
        return self._accelerator_devices[index]

    def has_cpu(self, index: int) -> bool:
        self.runtime()
        if virtual.virtual_gpu_index(index, self._virtual) is not None:
            return False  # that host device backs a virtual GPU
        return index < len(self._cpu_devices)

    def describe(self, native) -> Device:
        described = self._by_device.get(native)
        if described is None:
            self.runtime()
            described = self._by_device[native] = self._describe(native)
        return described

    def _describe(self, native) -> Device:
        if native.platform == "cpu":
            cpus = self._cpu_devices
            if native in cpus:
                index = cpus.index(native)
                gpu = virtual.virtual_gpu_index(index, self._virtual)
                if gpu is not None:
                    return Device("gpu", gpu, native=native, backend=self.name, virtual=True)
                return Device("cpu", index, native=native, backend=self.name)
        else:
            accelerators = self._accelerator_devices
            if native in accelerators:
                return Device("gpu", accelerators.index(native), native=native, backend=self.name,
                              platform=self.accelerator_platform())
        raise InvalidDeviceError(
            f"{native!r} is not one of this process's JAX devices (jax.local_devices()); devshim "
            f"handles the local CPU and accelerator devices. Move the array to one of those first, "
            f"e.g. jax.device_put(x, jax.local_devices()[0])."
        )

    def tensor_device(self, x) -> Device:
        try:
            sharding = x.sharding
        except AttributeError:  # a tracer (jit, grad, vmap): no sharding until it runs
            raise self._traced(x, "has no device") from None
        devices = sharding.device_set
        if len(devices) != 1:
            raise self._spread(x, devices)
        (native,) = devices
        described = self.describe(native)
        self._described[sharding] = described
        return described

    def native_device_of(self, x):
        # Inside jax.jit (grad, vmap) an array is a tracer, placed only when the function runs:
        # None, which array-api-compat's device(x) answers too and every jax.numpy device= takes
        # (the default device, or where the trace puts it).
        try:
            sharding = x.sharding
        except AttributeError:
            return None
        if len(sharding.device_set) != 1:
            # Spread over several devices: the Sharding is where it lives, as x.device and
            # array-api-compat's device(x) say, and it goes back into device= and device_put.
            return sharding
        return self.tensor_device(x).native

    def device(self, spec):
        # A Sharding (what device_of answers for an array spread over several devices) is a
        # target as it is, as for jax.device_put; the devices of this process must exist.
        if self.is_loaded() and isinstance(spec, self.fw.sharding.Sharding):
            for native in spec.addressable_devices:
                self._check_native(native)
            return spec
        return super().device(spec)

    def target(self, spec):
        # None is what device_of answers inside jax.jit: there it goes back into to_device and
        # copy_if_needed as into jax.device_put (copy_to refuses it for a concrete array).
        if spec is None:
            return None
        return super().target(spec)

    def same_place(self, x, native) -> bool:
        try:
            sharding = x.sharding
        except AttributeError:
            return False  # a tracer: place it where asked, the trace records that
        if native is None:
            return False  # copy_to says why None names no place outside jax.jit
        target = self._single_sharding(native)
        return sharding == target or _equivalent(sharding, target, x.ndim)

    def _single_sharding(self, native):
        found = self._single.get(native)
        if found is None:
            sharding = self.fw.sharding
            found = native if isinstance(native, sharding.Sharding) else sharding.SingleDeviceSharding(native)
            self._single[native] = found
        return found

    # ------------------------------------------------------------ copies

    def copy_to(self, x, native, non_blocking: bool):
        put = self._copy_put
        if native is None and not _is_tracer(x):
            raise self._no_device_named()
        try:
            if marker.watchers:  # a devshim guard sets JAX's own: this copy is explicit (jax issue 40285)
                with self.fw.transfer_guard("allow"):
                    return put(x, native)
            return put(x, native)
        except Exception:
            if _is_deleted(x):
                raise self._deleted(x, f"copy to {native}") from None
            raise

    def _no_device_named(self) -> InvalidDeviceError:
        return InvalidDeviceError(
            "None names no device here: it is what ds.device_of answers inside jax.jit (a tracer is "
            "placed only when the function runs), and there ds.to_device(t, None) is "
            "jax.device_put(t, None). Outside a transformation, name the device: "
            "ds.to_device(x, ds.device_of(y)), ds.try_gpu(), 'cpu'."
        )

    def _deleted(self, x, what: str) -> DatalessTensorError:
        return DatalessTensorError(
            f"This JAX array ({x.dtype}{list(x.shape)}) was deleted: x.delete(), or donated to a jitted "
            f"function (donate_argnums), freed its buffer, so there is nothing to {what}. Keep the "
            f"array alive (donate a copy: ds.to_device(x, ds.device_of(x))), or use the function's result."
        )

    @cached_property
    def _copy_put(self):
        """`copying_put(jax)`, made at the first copy."""
        return copying_put(self.fw)

    def copier(self, native, non_blocking: bool):
        if marker.watchers or native is None:
            return super().copier(native, non_blocking)
        put = self._copy_put

        def copy(x):
            try:
                return put(x, native)
            except Exception:
                return self.copy_to(x, native, non_blocking)  # the same copy, with the named errors

        return copy

    def tensor_to_numpy(self, x):
        import numpy as np

        if _is_tracer(x):
            raise self._traced(x, "has no values")
        if _is_deleted(x):
            raise self._deleted(x, "read")
        if self.fw.dtypes.issubdtype(x.dtype, self.fw.dtypes.prng_key):
            raise UnsupportedDtypeError(
                f"This is an array of typed PRNG keys ({x.dtype}); NumPy has no key type, so it cannot "
                f"become a NumPy array as it is. Take the key bits first: "
                f"ds.to_numpy(jax.random.key_data(keys)) (jax.random.wrap_key_data turns them back)."
            )
        # device_get is JAX's explicit transfer (allowed under jax.transfer_guard("disallow"));
        # on the CPU it returns a read-only view of x's buffer, so copy it for the caller.
        with self.fw.transfer_guard("allow") if marker.watchers else nullcontext():
            return np.array(self.fw.device_get(x), copy=True)

    def _traced(self, x, what: str) -> UnplacedTensorError:
        return UnplacedTensorError(
            f"This value is a JAX tracer ({type(x).__name__}): inside jax.jit, jax.grad, vmap and "
            f"other transformations an array {what} until the traced function runs. Ask "
            f"ds.device_of / ds.to_numpy outside the transformation (about its inputs or outputs); "
            f"ds.to_device and ds.copy_if_needed do work inside it."
        )

    def _spread(self, x, devices) -> MultiDeviceValueError:
        names = ", ".join(sorted(_name(self, d) for d in devices))
        return MultiDeviceValueError(
            f"This JAX array is spread over {len(devices)} devices ({names}; {x.sharding}), so it "
            f"has no one ds.Device. ds.device_of(x) returns its Sharding, which jax.device_put, "
            f"ds.to_device and jnp's device= take; ask about its parts (x.addressable_shards), or "
            f"gather it onto one device first: ds.to_device(x, device)."
        )

    def array_namespace(self, x):
        return self.fw.numpy  # jax.numpy is JAX's array-API namespace (x.__array_namespace__())

    def narrow(self, x, start: int, stop: int):
        # Slice where x is: an uncommitted array (made with no device) would otherwise be sliced
        # on JAX's default device, GPU 0 on a GPU machine and with virtual GPUs: a copy there.
        sharding = getattr(x, "sharding", None)
        if sharding is not None and len(sharding.device_set) == 1:
            (native,) = sharding.device_set
            with self.fw.default_device(native):
                return x[start:stop]
        return x[start:stop]

    # ------------------------------------------------------------ waiting

    def wait(self, x) -> None:
        if not _is_tracer(x):
            x.block_until_ready()

    def device_details(self) -> list:
        from devshim.backends.jax.memory import device_stats

        self.runtime()
        details: list = [{"device": "cpu:0", "name": f"host CPU ({self._cpu_devices[0]!r})"}]
        count = self.num_gpus()
        if count and self._virtual:
            for i in range(count):
                host = self._cpu_devices[virtual.host_index(i)]
                details.append({"device": f"gpu:{i}", "name": f"virtual GPU in host memory ({host!r})",
                                "virtual": True})
            return details
        for i, native in enumerate(self._accelerator_devices[:count]):
            entry: dict = {"device": f"gpu:{i}", "name": f"{native.device_kind} ({native!r})",
                           "platform": self.accelerator_platform()}
            stats = device_stats(native) or {}
            if stats.get("bytes_limit"):
                entry["memory_bytes"] = stats["bytes_limit"]
            details.append(entry)
        return details

    # ------------------------------------------------------------ virtual devices

    def enable_virtual_devices(self, count: int) -> None:
        if count == self._virtual:
            return
        self.check_virtual_count(count)
        with self._lock:
            if count == self._virtual:
                return
            needed = virtual.host_devices_needed(count)
            flags = os.environ.get("XLA_FLAGS")
            os.environ["XLA_FLAGS"] = _in_xla_own_code(flags or "", probes.release("jaxlib"))
            self._ask_for_host_devices(needed)
            try:
                have = len(self._cpu_devices)  # JAX initialises here if it had not yet
            except DeviceUnavailableError:
                have = 0
            finally:  # child processes get the user's flags
                if flags is None:
                    os.environ.pop("XLA_FLAGS", None)
                else:
                    os.environ["XLA_FLAGS"] = flags
            if have < needed:
                raise _too_late(count, needed, have)
            self._described.clear()
            self._by_device.clear()
            self._targets.clear()
            self._virtual = count
            self._follow_default_device()
            # JAX's rule on virtual GPUs too: a value read to the host once, guarded or not, is
            # read again without a transfer (the guard module keeps the record JAX keeps for a GPU)
            from devshim.backends.jax.guard import watch_host_reads

            watch_host_reads()

    def _follow_default_device(self) -> None:
        """With virtual GPUs on, JAX's default device is virtual gpu:0 (host device 1), as a GPU
        machine's is GPU 0: `jnp.ones(3)` lands there, and so do the constants `jax.grad`
        makes. A default the user chose (`jax.config.update("jax_default_device", ...)`) stays;
        with virtual GPUs off again, the default devshim set goes."""
        config = self.fw.config
        current = config.jax_default_device
        ours = self._default_set
        if self._virtual:
            if current is None or (ours is not None and current is ours):
                self._default_set = self._cpu_devices[virtual.host_index(0)]
                config.update("jax_default_device", self._default_set)
        elif ours is not None:
            self._default_set = None
            if current is ours:
                config.update("jax_default_device", None)

    def _ask_for_host_devices(self, needed: int) -> None:
        """Ask JAX for `needed` host devices; JAX honours it only before it initialises."""
        jax = self.fw
        try:
            current = jax.config.jax_num_cpu_devices
        except AttributeError:  # JAX without the option reads XLA_FLAGS when it initialises
            flags = os.environ.get("XLA_FLAGS", "")
            if _HOST_COUNT_FLAG not in flags:
                os.environ["XLA_FLAGS"] = f"{flags} {_HOST_COUNT_FLAG}={needed}".strip()
            return
        if current < needed:
            try:
                jax.config.update("jax_num_cpu_devices", needed)
            except RuntimeError:
                pass  # initialised already: the count the caller checks says whether it is enough



def _in_xla_own_code(flags: str, jaxlib_release) -> str:
    """`flags` (XLA_FLAGS, which XLA reads when JAX initialises) asking XLA's CPU compiler to keep
    the operations it would hand to kernel libraries in its own code (`_LIBRARY_PASSES`); what the
    user set stays: passes they disabled are kept beside these, a YNNPACK setting of theirs wins.

    Example:
        >>> _in_xla_own_code("--xla_disable_hlo_passes=my-pass", (0, 4, 31))
        '--xla_disable_hlo_passes=my-pass,onednn-convolution-rewriter,onednn-matmul-rewriter,onednn-ops-rewriter'
    """
    words = flags.split()
    disabled = [word for word in words if word.startswith(_DISABLED_PASSES)]
    named = [name for word in disabled for name in word[len(_DISABLED_PASSES):].split(",") if name]
    words = [word for word in words if word not in disabled]
    words.append(_DISABLED_PASSES + ",".join(dict.fromkeys([*named, *_LIBRARY_PASSES])))
    oldest, newer = _YNNPACK_FLAG_RELEASES
    if (jaxlib_release is not None and oldest <= jaxlib_release < newer
            and not any(word.startswith(_YNNPACK_OFF.rstrip("=")) for word in words)):
        words.append(_YNNPACK_OFF)
    return " ".join(words)


def copying_put(jax):
    """`(x, device) -> a copy of x on device in new storage`, recorded by JAX's tracing:
    `jax.device_put(x, device, may_alias=False)` where that gives `x` new storage on its own
    device, tried once on a two-element array: JAX 0.6 and later copy; JAX 0.4.34 to 0.5.3 take
    `may_alias` and hand the same buffer back, so deleting or donating the "copy" deleted the
    original; JAX without `may_alias` (0.4.33 and older) has nothing to try. Tried by deleting the
    copy (which every platform can, where not every one exposes buffer pointers), under JAX's own
    transfer guard allowing it and as devshim's explicit transfer, and evaluated at once inside a
    trace. Where it aliases, the array put on the device is copied there.

    Example:
        >>> copying_put(jax)(x, jax.devices()[0]) is x
        False
    """
    import inspect

    device_put = jax.device_put
    if "may_alias" in inspect.signature(device_put).parameters:
        with marker.explicit(), jax.transfer_guard("allow"), jax.ensure_compile_time_eval():
            source = jax.numpy.zeros(2)
            copy = device_put(source, next(iter(source.devices())), may_alias=False)
            copy.delete()
            if not source.is_deleted():
                return lambda x, native: device_put(x, native, may_alias=False)
    array = jax.numpy.array

    def put(x, native):
        return array(device_put(x, native), copy=True)  # copied on x's new device

    return put


def _is_tracer(x) -> bool:
    """Tracers have no sharding until the traced function runs (concrete arrays always have one)."""
    return not hasattr(x, "sharding")


def _name(adapter, native) -> str:
    try:
        return str(adapter.describe(native))
    except InvalidDeviceError:  # another process's device, in a multi-process run
        return repr(native)


def _equivalent(sharding, target, ndim: int) -> bool:
    """Whether a sharding of another kind (a NamedSharding over one device, say) places an
    array of `ndim` dimensions exactly as `target` does: same devices, same shards, same memory."""
    if len(sharding.device_set) != len(target.device_set):
        return False
    try:
        return sharding.is_equivalent_to(target, ndim)
    except Exception:  # noqa: BLE001 - a spec that does not fit ndim (JAX raises IndexError) places nothing alike
        return False


def _platform_name(native) -> str:
    platform = native.platform.lower()
    if platform == "gpu":  # JAX calls CUDA and ROCm devices "gpu"; the client says which
        version = str(getattr(native.client, "platform_version", "")).lower()
        return "rocm" if "rocm" in version else "cuda"
    return platform


def _is_deleted(x) -> bool:
    try:
        return bool(x.is_deleted())
    except Exception:  # noqa: BLE001 - a value without is_deleted, or that cannot say, is not known to be deleted
        return False


def _too_late(count: int, needed: int, have: int) -> BackendError:
    """Virtual GPUs asked for after JAX initialised its backends. When the variable asked, it was
    set in time (JAX reads nothing of it): the remedy is to ask devshim before JAX's first use."""
    if settings.virtual_devices_from_environment():
        asked = f"{settings.VIRTUAL_DEVICES_VAR}={count} asks"
        remedy = ("Ask devshim first: call ds.num_gpus() (or ds.try_gpu()) right after importing JAX, "
                  "before any JAX array, computation or jax.devices() call")
    else:
        asked = f"ds.testing.virtual_devices({count}) asked"
        remedy = (f"Call ds.testing.virtual_devices({count}) right after importing JAX, before any JAX "
                  f"array, computation or jax.devices() call, or set {settings.VIRTUAL_DEVICES_VAR}={count} "
                  f"before starting Python")
    return BackendError(
        f"{asked} for {count} virtual GPUs; they need {needed} JAX host devices, but JAX has already "
        f"initialised its backends with {have}, so it is too late to add them. {remedy}."
    )

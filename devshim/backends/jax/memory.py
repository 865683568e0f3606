"""JAX's memory figures (`ds.memory`, `ds.memory_peak`) and its out-of-memory error.

- GPUs and TPUs: `device.memory_stats()`, the allocator's own counts: `bytes_in_use`
  (in use), `pool_bytes` (reserved, where the allocator keeps a pool), `peak_bytes_in_use`
  (peak; JAX cannot reset it) and `bytes_limit` (total: the most JAX's allocator may take,
  which is 75% of the GPU by default, and free is what is left of it).
- virtual GPUs (host devices), and devices whose `memory_stats()` is None: the bytes of the
  live arrays on the device (`jax.live_arrays()`; buffers shared by several arrays count
  once), their size from `DEVSHIM_VIRTUAL_MEMORY` (reported, not enforced: XLA's CPU client
  takes no limit).
- the CPU: the process's and the machine's figures.

Out of memory is the `JaxRuntimeError` (`XlaRuntimeError` before JAX 0.4.36) whose
message starts `RESOURCE_EXHAUSTED`.

Estimates (`ds.estimate_memory`): the step is compiled, not run (`jax.jit(step).lower(*args)
.compile()`; arguments may be `jax.ShapeDtypeStruct`s, which hold no memory, and those that
hold no array are static; a step jitted already is lowered as it is, with its own static and
donated arguments), and XLA's buffer assignment says what it takes
(`compiled.memory_analysis()`): its arguments, its outputs, less the outputs that reuse a
donated argument's buffer, and its temporaries, all live at once at worst. A step sharded over
several devices runs one program on each: the figures are each device's. (XLA's own
`peak_memory_in_bytes` leaves the temporaries out on the CPU, where they are allocated all the same.)
On the CPU, XLA hands some operations to kernel libraries (oneDNN's custom calls, YNNPACK's
fusions, LAPACK's), whose own scratch memory its analysis does not count: the estimate names them
(`details["library_operations"]`, and "not counted: ..." where printed). Virtual GPUs ask XLA to
keep oneDNN's and YNNPACK's in its own code (`core._in_xla_own_code`), as a GPU's are.
"""

from __future__ import annotations

import collections
import re

import jax
import numpy as np

from devshim.backends.memory_base import DeviceMemory, MemoryInfo, buffer_bytes
from devshim.errors import MemoryEstimateError, MemoryEstimateUnsupportedError

__all__ = ["JaxMemory"]


def device_stats(native):
    """`native.memory_stats()`, or None where the device keeps none (or cannot say)."""
    try:
        return native.memory_stats() or None
    except (RuntimeError, NotImplementedError, AttributeError):
        return None


def _buffers(array):
    """(native device, start, stop) of each of `array`'s buffers on this process's devices."""
    devices = array.sharding.device_set
    if len(devices) == 1:
        (native,) = devices
        yield native, buffer_start(array), array.nbytes
        return
    for shard in array.addressable_shards:
        yield shard.device, buffer_start(shard.data), shard.data.nbytes


def buffer_start(array):
    """The address of `array`'s buffer, or None where JAX cannot say (then it is counted on its own)."""
    try:
        return array.unsafe_buffer_pointer()
    except (RuntimeError, ValueError, AttributeError, NotImplementedError):
        return None  # counted on its own


class JaxMemory(DeviceMemory):
    """JAX's allocator statistics where it keeps them, the live arrays elsewhere.

    Example:
        >>> ds.backends.memory("jax").figures(ds.get_backend("jax"), jax.devices()[0]).source
        'this process (resident memory) and the machine'
    """

    free_hint = ("and JAX takes 75% of a GPU when it starts: XLA_PYTHON_CLIENT_PREALLOCATE=false (or "
                 "XLA_PYTHON_CLIENT_MEM_FRACTION) leaves the rest to others")
    live_source = "the live arrays on it (jax.live_arrays)"

    def accelerator_figures(self, adapter, native, device) -> MemoryInfo:
        stats = device_stats(native)
        if stats is None:
            return MemoryInfo(device, in_use=self.live_bytes(adapter, device), source=self.live_source)
        in_use, limit = stats.get("bytes_in_use"), stats.get("bytes_limit")
        free = max(0, limit - in_use) if limit is not None and in_use is not None else None
        return MemoryInfo(device, in_use=in_use, reserved=stats.get("pool_bytes"),
                          peak=stats.get("peak_bytes_in_use"), total=limit, free=free,
                          source="jax Device.memory_stats()")

    def live_bytes(self, adapter, device):
        found = []
        # The device's own platform: without it, JAX lists the default backend's arrays only, and
        # virtual GPUs (host devices) beside a real GPU would read nothing in use.
        for array in jax.live_arrays(getattr(device.native, "platform", None)):
            try:
                buffers = list(_buffers(array))
            except (RuntimeError, ValueError, AttributeError):  # deleted meanwhile
                continue
            found += [(start, size) for native, start, size in buffers if adapter.describe(native) == device]
        return buffer_bytes(found)

    def in_use(self, adapter, native):
        stats = device_stats(native) if native.platform != "cpu" else None
        if stats is not None:
            return stats.get("bytes_in_use")
        return super().in_use(adapter, native)

    def is_out_of_memory(self, error: BaseException) -> bool:
        module = type(error).__module__ or ""
        return (isinstance(error, RuntimeError) and module.split(".")[0] in ("jax", "jaxlib")
                and "RESOURCE_EXHAUSTED" in str(error))

    def model_bytes(self, model):
        return sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(model) if isinstance(leaf, jax.Array))

    def estimate(self, adapter, step, args: tuple, kwargs: dict) -> dict:
        try:
            compiled = _compile(_lowered(step, args, kwargs))
        except jax.errors.ConcretizationTypeError as error:
            raise MemoryEstimateError(
                "the step read an array's value while JAX compiled it (a Python branch or shape on a traced "
                "value, float(x)), which an estimate without memory does not have. Make it static (pass it as a "
                "plain Python number; a step you jitted yourself: name it in jax.jit's static_argnums) or write it "
                "with jax.lax.cond / jnp.where."
            ) from error
        found = compiled.memory_analysis()
        if found is None:
            raise MemoryEstimateUnsupportedError(
                f"JAX {jax.__version__} gives no memory analysis of a compiled step on this platform. Measure "
                f"it instead: ds.memory_peak on a GPU."
            )
        arguments, outputs = found.argument_size_in_bytes, found.output_size_in_bytes
        aliased, temporaries = found.alias_size_in_bytes, found.temp_size_in_bytes
        natives = _devices_of(args, kwargs)
        devices = [str(adapter.describe(native)) for native in natives]
        details = {"arguments": arguments, "outputs": outputs, "aliased": aliased, "temporaries": temporaries,
                   "code": found.generated_code_size_in_bytes}
        if len(devices) > 1:
            details["devices"] = devices
        if natives[0].platform == "cpu":
            details.update(_library_operations(compiled))
        return {
            "peak": arguments + outputs - aliased + temporaries, "kept": arguments + outputs - aliased,
            "device": devices[0],
            "method": "XLA's memory analysis of the compiled step: arguments, outputs (less those reusing a "
                      "donated argument) and temporaries",
            "details": details,
        }


#: An operation XLA's compiled program hands to code of its own (a custom call's target, a custom
#: fusion's kind), as the compiled HLO text writes it.
_LIBRARY_OPERATION = re.compile(r'custom_call_target="([^"]+)"|"kind":\s*"(__\w+)"')


def _library_operations(compiled) -> dict:
    """The operations of a CPU program that run in kernel libraries, by name and count, with the
    sentence an estimate prints for them; {} where there are none. Their own scratch is outside
    XLA's count, and how much they take differs by library and release: for the tests' small CNN
    at batch 512 on the CPU device, YNNPACK's weight gradient on JAX 0.10.2 packs its operands
    whole (1.19 times the estimate, 33 MiB beside 176 MiB), on 0.12.0.1 it took 1.04 times; the
    same step kept in XLA's own code (as on virtual GPUs) measured 1.03 times on each release."""
    text = compiled.as_text() or ""  # (None where a program has no text)
    found = collections.Counter(custom or fusion for custom, fusion in _LIBRARY_OPERATION.findall(text))
    if not found:
        return {}
    operations = dict(sorted(found.items()))
    names = ", ".join(f"{name} x{count}" if count > 1 else name for name, count in operations.items())
    total = sum(found.values())
    return {"library_operations": operations,
            "not_counted": f"whatever scratch memory the {total} operation{'s' * (total > 1)} XLA's CPU runtime "
                           f"hands to kernel libraries take ({names})"}


#: XLA's buffer assignment, which the memory analysis reads, is made by its HLO passes, before code
#: generation: the estimate asks LLVM for no optimisation (a compile in a fifth of the time, the
#: same figures, measured on JAX 0.10.2's CPU client).
_QUICK = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def _lowered(step, args: tuple, kwargs: dict):
    """`step` lowered for `args`: a step jitted already as it is (`jax.jit(step, donate_argnums=0)`:
    its own static arguments and donated buffers), another jitted with the arguments that hold no
    array static."""
    if callable(getattr(step, "lower", None)):
        return step.lower(*args, **kwargs)
    static = tuple(i for i, value in enumerate(args) if not _holds_arrays(value))
    static_names = tuple(name for name, value in kwargs.items() if not _holds_arrays(value))
    return jax.jit(step, static_argnums=static, static_argnames=static_names).lower(*args, **kwargs)


def _compile(lowered):
    try:
        return lowered.compile(compiler_options=_QUICK)
    except (TypeError, ValueError, RuntimeError):  # a JAX or an XLA without these options
        return lowered.compile()


def _holds_arrays(value) -> bool:
    """Whether an argument holds arrays or their shapes (traced), or is static (a Python value)."""
    return any(isinstance(leaf, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct))
               for leaf in jax.tree_util.tree_leaves(value))


def _devices_of(args: tuple, kwargs: dict) -> list:
    """The devices the compiled step runs on, by id: its arguments' (a step sharded over several
    runs one program on each, and XLA's figures are each one's), else JAX's default device."""
    for leaf in jax.tree_util.tree_leaves((args, kwargs)):
        devices = getattr(getattr(leaf, "sharding", None), "device_set", None)
        if devices:
            return sorted(devices, key=lambda native: native.id)
    return [jax.devices()[0]]

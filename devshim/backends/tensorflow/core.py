"""TensorFlow's device contract.

Native devices are `TFDevice` values: immutable, hashable, printed as
TensorFlow names ("/GPU:0"), and usable as `with` blocks that open a
`tf.device` scope, the way TensorFlow code places new tensors::

    with ds.try_gpu():
        X = tf.ones((2, 3))

Tensors are `tf.Tensor` and `tf.Variable`, composite tensors
(`tf.RaggedTensor`, `tf.SparseTensor`, `tf.IndexedSlices` and other
`CompositeTensor` types: moved component by component, keeping their type)
and Keras 3 variables on the TensorFlow backend (moved through their value).

Virtual devices follow `devshim.backends.virtual`: with
`DEVSHIM_VIRTUAL_DEVICES=N` the host CPU is split into N + 1 logical CPU
devices before TensorFlow initialises; `/CPU:0` stays the host and virtual
`gpu:i` is `/CPU:{i+1}`.
"""

from __future__ import annotations

import sys
import threading
from functools import cached_property

from devshim import settings
from devshim.backends import virtual
from devshim.backends.base import Backend, DeviceTable
from devshim.backends.tensorflow import SPEC, _internals
from devshim._device import Device, parse_spec
from devshim.errors import (
    BackendError, InvalidDeviceError, MultiDeviceValueError, UnplacedTensorError, UnsupportedDtypeError, UnsupportedValueError,
)


class TFDevice(str):
    """A TensorFlow device name that is also a `tf.device` scope.

    The value is the canonical name ("/GPU:0"), so TensorFlow takes it
    wherever it takes a device string (`tf.device(dev)`), and it prints,
    hashes and compares as that name. Each `with` opens its own
    `tf.device` scope, so the same object can be nested and re-entered, in
    any thread.

    Example:
        >>> dev = TFDevice("/device:GPU:1")
        >>> print(dev), dev == "/GPU:1", dev in {TFDevice("/GPU:1")}
        /GPU:1
        (None, True, True)
        >>> with dev:
        ...     Y = tf.random.uniform((2, 3))
    """

    def __new__(cls, name: str) -> "TFDevice":
        if not isinstance(name, str):
            raise InvalidDeviceError(
                f"TFDevice takes a device name such as '/GPU:0', not {type(name).__name__}."
            )
        parsed = parse_spec(str(name))
        if parsed.kind == "meta" or parsed.platform not in (None, "cuda"):
            raise InvalidDeviceError(
                f"devshim's TensorFlow devices are CPUs and GPUs; {name!r} names neither. "
                f"Use a name such as '/CPU:0' or '/GPU:1'."
            )
        device = super().__new__(cls, f"/{parsed.kind.upper()}:{parsed.index}")
        object.__setattr__(device, "_local", threading.local())  # per-thread stack of open scopes
        return device

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError("TFDevice is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("TFDevice is immutable")

    @property
    def name(self) -> str:
        """The canonical TensorFlow name, as a plain string."""
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"TFDevice({self.name!r})"

    def __reduce__(self):
        return (TFDevice, (self.name,))

    def __deepcopy__(self, memo=None) -> "TFDevice":
        return self

    __copy__ = __deepcopy__

    def _scopes(self) -> list:
        return vars(self._local).setdefault("scopes", [])

    def __enter__(self) -> "TFDevice":
        from devshim.backends import load_backend

        tf = load_backend("tensorflow").runtime()
        scope = tf.device(self.name)
        scope.__enter__()
        self._scopes().append(scope)
        return self

    def __exit__(self, *exc):
        return self._scopes().pop().__exit__(*exc)


class TensorflowBackend(Backend):
    """TensorFlow tensors, variables and composite tensors.

    Example:
        >>> with ds.use_backend("tensorflow"):
        ...     with ds.try_gpu():
        ...         X = tf.ones((2, 3))
    """

    spec = SPEC

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._virtual = 0  # logical CPUs this process configured as virtual GPUs
        self._natives: dict = {}
        self._described = DeviceTable("device")  # device name -> Device

    def framework_imported(self, module) -> None:
        # AutoGraph rewrites the Python of every function a tf.function calls, unless its module
        # is on AutoGraph's list (NumPy's and Keras's are): devshim's, rewritten, fails there
        # (a truth test of a symbolic tensor inside the dispatch). Added before the first trace
        # that could call devshim, as every devshim call on a TF tensor reaches TF through here.
        leave_alone = _internals.AUTOGRAPH_RULES.get()
        if leave_alone is not None:
            leave_alone("devshim")

    # ------------------------------------------------------------ primitives

    def is_tensor(self, x) -> bool:
        tf = self.fw
        return isinstance(x, (tf.Tensor, tf.Variable, _composite_tensor(), tf.TensorArray)) or _is_keras_variable(x)

    def is_native_device(self, obj) -> bool:
        return isinstance(obj, TFDevice)

    def accelerator_count(self) -> int:
        # The visible physical GPUs: TensorFlow numbers its logical /GPU:i over these, and Horovod's
        # recipe (tf.config.set_visible_devices(gpus[local_rank], "GPU")) leaves one visible. Lists
        # physical devices only; the runtime (and its logical devices) stays uninitialised.
        return len(self.fw.config.get_visible_devices("GPU"))

    def visibility_narrowed(self) -> bool:
        tf = self.fw
        return len(tf.config.get_visible_devices("GPU")) < len(tf.config.list_physical_devices("GPU"))

    def make_native_device(self, kind: str, index: int):
        # Import tensorflow now: a TFDevice made while it is unimported could not be
        # recognised by dispatch (which only asks frameworks that are loaded).
        _ = self.fw
        if kind == "meta":
            raise self._no_meta()
        if kind == "gpu":
            if settings.virtual_device_count():
                self.runtime()
                return self._native(f"/CPU:{virtual.host_index(index)}")
            return self._native(f"/GPU:{index}")
        return self._native(f"/CPU:{index}")

    def _native(self, name: str) -> TFDevice:
        return self._natives.get(name) or self._natives.setdefault(name, TFDevice(name))

    def describe(self, native) -> Device:
        return self._describe_name(native.name)

    def _describe_name(self, name: str) -> Device:
        described = self._described.get(name)
        if described is None:
            kind, index, _ = parse_spec(name)
            canonical = f"/{kind.upper()}:{index}"
            # One Device object per place, whatever the spelling: callers may compare with `is`.
            described = self._described.get(canonical)
            if described is None:
                native = self._native(canonical)
                gpu = virtual.virtual_gpu_index(index, self._virtual) if kind == "cpu" else None
                if gpu is not None:
                    described = Device("gpu", gpu, native=native, backend=self.name, virtual=True)
                else:
                    described = Device(kind, index, native=native, backend=self.name,
                                       platform="cuda" if kind == "gpu" else None)
                self._described[canonical] = described
            self._described[name] = described
        return described

    def tensor_device(self, x) -> Device:
        name = getattr(x, "device", None)
        if name and type(name) is str:
            return self._describe_name(name)
        return self._composite_device(x)

    def _composite_device(self, x) -> Device:
        tf = self.fw
        if _is_keras_variable(x):
            return self.tensor_device(self._keras_value(x))
        if isinstance(x, tf.TensorArray):
            raise self._refuse(x)
        if isinstance(x, _composite_tensor()):
            places = {self.tensor_device(part) for part in tf.nest.flatten(x, expand_composites=True)}
            if len(places) == 1:
                return places.pop()
            if not places:
                raise UnplacedTensorError(f"This {type(x).__name__} holds no tensor, so it has no device.")
            listing = ", ".join(sorted(str(p) for p in places))
            raise MultiDeviceValueError(
                f"The parts of this {type(x).__name__} live on several devices ({listing}), so it has "
                f"no one device. Move it whole first: ds.to_device(x, device)."
            )
        raise UnplacedTensorError(
            f"This {type(x).__name__} has no device yet: it is a symbolic tensor inside "
            f"tf.function (or a graph), placed only when the graph runs. Ask ds.device_of "
            f"about eager tensors, or place ops explicitly with `with ds.try_gpu():`."
        )

    def same_place(self, x, native) -> bool:
        name = getattr(x, "device", None)
        if type(name) is str:
            # An empty name is a symbolic tensor (tf.function): copying under the
            # target's scope is the only way to say where it must go.
            return bool(name) and self._describe_name(name) == self.describe(native)
        try:
            return self._composite_device(x) == self.describe(native)
        except UnplacedTensorError:
            return False

    def has_cpu(self, index: int) -> bool:
        tf = self.fw
        host = tf.config.list_physical_devices("CPU")
        logical = tf.config.get_logical_device_configuration(host[0]) if host else None
        real = (len(logical) - self._virtual) if logical else len(host)
        return index < real

    def _cacheable(self, spec) -> bool:
        # Under virtual devices a TensorFlow name reads two ways: TFDevice("/CPU:1") is that
        # logical device (virtual gpu:0), while the spec string "/CPU:1" asks for a CPU.
        # The two hash alike, so neither may be remembered for the other.
        if self._virtual and isinstance(spec, str) and spec.startswith("/"):
            return False
        return super()._cacheable(spec)

    # ------------------------------------------------------------ copies

    def copy_to(self, x, native, non_blocking: bool):
        tf = self.runtime()
        if isinstance(x, tf.Tensor):
            return self._copy_tensor(tf, x, native)
        if isinstance(x, tf.Variable):
            # Reads the value on the variable's device; the tape records the read.
            return self._copy_tensor(tf, tf.convert_to_tensor(x), native)
        if _is_keras_variable(x):
            return self.copy_to(self._keras_value(x), native, False)
        if isinstance(x, _composite_tensor()):
            # Each component (values, row splits, indices...) is copied; the type is rebuilt.
            return tf.nest.map_structure(
                lambda part: self.copy_to(part, native, False), x, expand_composites=True
            )
        raise self._refuse(x)

    def _copy_tensor(self, tf, x, native):
        target = self.describe(native)
        source = self.tensor_device(x) if x.device else None
        # int32 tensors stay in host memory even on a GPU, so treat them as host-backed.
        host_int32 = x.dtype == tf.int32
        with tf.device(native.name):
            if source is not None and not host_int32 and not _shares_memory(source, target):
                # Distinct memories: the transfer itself allocates new storage on the target.
                return tf.identity(x)
            if source is not None and source != target:
                # Two host-backed devices: bring x over first (TensorFlow hands the same
                # buffer over), so the copy below runs with its input on its own device,
                # which the "explicit" device policy requires.
                x = tf.identity(x)
            # Same memory: TensorFlow would hand over the same buffer, so copy explicitly.
            try:
                y = self._deep_copy(x)
            except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError):
                if target.kind != "gpu" or target.virtual:
                    raise UnsupportedDtypeError(
                        f"TensorFlow cannot copy a {x.dtype.name} tensor; devshim copies "
                        f"numbers, bool and strings. Convert it to one of those first."
                    ) from None
                y = None  # no kernel for this dtype on the GPU and soft placement is off
        if y is None or (source is not None and self.tensor_device(y) != target):
            y = self._copy_through_host(tf, x, native)
        return y

    @cached_property
    def _deep_copy(self):
        """TensorFlow's DeepCopy op, with a gradient.

        DeepCopy has no gradient of its own. Wrapping it in tf.custom_gradient costs
        30 to 100 us a call, so the first copy registers the identity gradient for the
        op type instead (with TensorFlow's public tf.RegisterGradient, only where no
        gradient is registered yet); the raw op then costs what the copy costs.
        """
        tf = self.fw
        with self._lock:
            try:
                tf.RegisterGradient("DeepCopy")(_identity_gradient)
            except KeyError:
                pass  # registered already (by devshim in another thread, or by someone else)
        deep_copy = tf.raw_ops.DeepCopy
        return lambda x: deep_copy(x=x)

    def _copy_through_host(self, tf, x, native):
        # A GPU without a DeepCopy kernel for this dtype (bool, int16, complex...):
        # GPU -> host -> GPU is two real transfers, so the result is new storage.
        with tf.device("/CPU:0"):
            host = tf.identity(x)
        with tf.device(native.name):
            y = tf.identity(host)
        if self.tensor_device(y) != self.describe(native):
            raise UnsupportedDtypeError(
                f"TensorFlow placed a {x.dtype.name} copy on {y.device} instead of {native}: "
                f"it has no kernel for that dtype there. Cast it to a supported dtype first."
            )
        return y

    def tensor_to_numpy(self, x):
        import numpy as np

        tf = self.fw
        if isinstance(x, tf.Variable):
            x = tf.convert_to_tensor(x)
        elif _is_keras_variable(x):
            return self.tensor_to_numpy(self._keras_value(x))
        elif not isinstance(x, tf.Tensor):
            raise UnsupportedValueError(
                f"A {type(x).__name__} is not one NumPy array. Convert it first: "
                f"{_DENSE_ADVICE.get(type(x).__name__, 'to a dense tf.Tensor')}, then call ds.to_numpy."
            )
        value = x.numpy()
        # EagerTensor.numpy() copies arrays today, but 0-d tensors give a NumPy scalar and
        # np.asarray(x) would share memory on the CPU: make sure the caller owns the result.
        if isinstance(value, np.ndarray) and value.flags.owndata and value.base is None:
            return value
        return np.array(value, copy=True)

    def array_namespace(self, x):
        # array-api-compat has no TensorFlow; tf.experimental.numpy is TensorFlow's NumPy API.
        return self.fw.experimental.numpy

    def _keras_value(self, x):
        value = x.value
        if not isinstance(value, (self.fw.Variable, self.fw.Tensor)):
            raise UnsupportedValueError(
                f"This Keras variable belongs to Keras's {type(value).__module__.split('.')[0]} "
                f"backend, not TensorFlow's; pass its value (variable.value) to devshim instead."
            )
        return value

    def _refuse(self, x) -> UnsupportedValueError:
        return UnsupportedValueError(
            f"devshim cannot move a {type(x).__name__}: TensorFlow gives no way to copy it as a "
            f"whole. Stack it into a tensor first (tensor_array.stack()), or move its tensors."
        )

    def narrow(self, x, start: int, stop: int):
        tf = self.fw
        if isinstance(x, tf.Tensor) and x.device:
            with tf.device(x.device):  # slice where x is, not on TensorFlow's default device
                return x[start:stop]
        return x[start:stop]

    def on_device(self, native):
        return self.runtime().device(native.name)

    # ------------------------------------------------------------ waiting

    def synchronize(self, native) -> None:
        self.fw.test.experimental.sync_devices()  # TensorFlow waits on every device; it has no per-device call

    def wait(self, x) -> None:
        self.synchronize(None)

    def device_details(self) -> list:
        tf = self.fw
        details: list = [{"device": "cpu:0", "name": "host CPU (/CPU:0)"}]
        count = self.num_gpus()
        if count and settings.virtual_device_count():
            return details + [
                {"device": f"gpu:{i}", "name": f"virtual GPU in host memory (logical /CPU:{virtual.host_index(i)})",
                 "virtual": True}
                for i in range(count)
            ]
        for i, physical in enumerate(tf.config.get_visible_devices("GPU")[:count]):
            entry: dict = {"device": f"gpu:{i}", "name": f"/GPU:{i}", "platform": "cuda"}
            try:
                found = tf.config.experimental.get_device_details(physical)
            except (ValueError, RuntimeError):
                found = {}
            if found.get("device_name"):
                entry["name"] = f"{found['device_name']} (/GPU:{i})"
            # TensorFlow reports memory in use, not the total, so there is no memory_bytes.
            details.append(entry)
        return details

    # ------------------------------------------------------------ virtual devices

    def enable_virtual_devices(self, count: int) -> None:
        if count == self._virtual:
            return
        with self._lock:
            if count == self._virtual:
                return
            tf = self.fw
            host = tf.config.list_physical_devices("CPU")[0]
            needed = virtual.host_devices_needed(count)
            wanted = [tf.config.LogicalDeviceConfiguration() for _ in range(needed)]
            current = tf.config.get_logical_device_configuration(host)
            if current is None or len(current) != needed:
                try:
                    tf.config.set_logical_device_configuration(host, wanted)
                except RuntimeError:
                    raise _too_late(count, len(current) - 1 if current else 0) from None
            self._described.clear()
            self._targets.clear()
            self._virtual = count


_DENSE_ADVICE = {
    "RaggedTensor": "pad it with x.to_tensor(), or take x.flat_values",
    "SparseTensor": "tf.sparse.to_dense(x)",
    "IndexedSlices": "tf.convert_to_tensor(x)",
}


def _too_late(count: int, configured: int) -> BackendError:
    """Virtual GPUs asked for after TensorFlow started its devices: the remedy is to ask devshim
    first (the variable, when it was set, was set in time); `configured` virtual GPUs were
    set up already (the number cannot change then)."""
    from_environment = settings.virtual_devices_from_environment()
    asked = (f"{settings.VIRTUAL_DEVICES_VAR}={count} asks" if from_environment
             else f"ds.testing.virtual_devices({count}) asked")
    if configured:
        return BackendError(
            f"{asked} for {count} virtual GPUs, but TensorFlow started its devices with {configured}, "
            f"and the number cannot change once it has. Ask for {count} before TensorFlow starts "
            f"(before its first tensor, op or tf.distribute strategy), or keep {configured}."
        )
    then = ("" if from_environment else
            f" (call ds.testing.virtual_devices({count}) before that too, or set "
            f"{settings.VIRTUAL_DEVICES_VAR}={count} before starting Python)")
    return BackendError(
        f"{asked} for {count} virtual GPUs, but TensorFlow started its devices before devshim was "
        f"first asked for them, so it is too late to add them: creating a tf.distribute strategy "
        f"(MultiWorkerMirroredStrategy, MirroredStrategy), a tensor or an op starts them. Ask devshim "
        f"first: call ds.num_gpus() (or ds.try_gpu()) right after importing TensorFlow, before the "
        f"strategy or any tensor{then}."
    )


def _identity_gradient(op, grad):
    """DeepCopy's gradient: the copy's gradient flows back to its input unchanged."""
    return grad


class _NoCompositeTensor:
    """Stands in for tf.__internal__.CompositeTensor on a TensorFlow that moved it: no value is one."""


def _composite_tensor() -> type:
    """TensorFlow's base class of composite tensors (RaggedTensor, SparseTensor, ...)."""
    return _internals.COMPOSITE_TENSOR.get() or _NoCompositeTensor


def _is_keras_variable(x) -> bool:
    variable = getattr(sys.modules.get("keras"), "Variable", None)
    return variable is not None and isinstance(x, variable)


def _shares_memory(a: Device, b: Device) -> bool:
    """Whether two devices' tensors live in the same memory (host-backed, or one GPU)."""
    return a == b or ((a.kind == "cpu" or a.virtual) and (b.kind == "cpu" or b.virtual))

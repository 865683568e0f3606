"""TensorFlow adapter.

Native devices are ``TFDevice`` values: immutable, hashable, printed as
TensorFlow names ("/GPU:0"), and usable as ``with`` blocks that open a
``tf.device`` scope, the way TensorFlow code places new tensors::

    with ds.try_gpu():
        X = tf.ones((2, 3))

Virtual devices: with ``DEVSHIM_VIRTUAL_DEVICES=N`` the host CPU is split into
N + 1 logical CPU devices before TensorFlow initialises; ``/CPU:0`` stays the
host and virtual ``gpu:i`` is ``/CPU:{i+1}``.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional

from devshim import config
from devshim.backends.base import Backend
from devshim.device import Device, parse_spec
from devshim.errors import BackendError, DevshimError, InvalidDeviceError


class TFDevice(str):
    """A TensorFlow device name that is also a ``tf.device`` scope.

    The value is the canonical name ("/GPU:0"), so TensorFlow takes it
    wherever it takes a device string (``tf.device(dev)``), and it prints,
    hashes and compares as that name. Each ``with`` opens its own
    ``tf.device`` scope, so the same object can be nested and re-entered, in
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
        parsed = parse_spec(name)
        device = super().__new__(cls, f"/{parsed.kind.upper()}:{parsed.index}")
        object.__setattr__(device, "_local", threading.local())  # per-thread stack of open scopes
        return device

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("TFDevice is immutable")

    @property
    def name(self) -> str:
        """The canonical TensorFlow name, as a plain string."""
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"TFDevice({self.name!r})"

    def __reduce__(self):
        return (TFDevice, (self.name,))

    def _scopes(self) -> list:
        scopes = getattr(self._local, "scopes", None)
        if scopes is None:
            scopes = self._local.scopes = []
        return scopes

    def __enter__(self) -> "TFDevice":
        from devshim.backends import load_backend

        tf = load_backend("tensorflow").runtime()
        scope = tf.device(self.name)
        scope.__enter__()
        self._scopes().append(scope)
        return self

    def __exit__(self, *exc: Any) -> Optional[bool]:
        return self._scopes().pop().__exit__(*exc)


class TensorflowBackend(Backend):
    name = "tensorflow"
    module = "tensorflow"
    pip_extra = "tensorflow"
    supports_virtual_devices = True
    distributions = ("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tensorflow-intel", "tf-nightly")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._virtual = 0  # logical CPUs this process configured as virtual GPUs
        self._natives: Dict[str, TFDevice] = {}
        self._described: Dict[str, Device] = {}
        self._deep_copy = None

    def runtime(self) -> Any:
        """The tensorflow module, with requested virtual devices configured first.

        Call this before anything that may make TensorFlow initialise its devices.
        """
        requested = config.virtual_device_count()
        if requested and requested != self._virtual:
            self.enable_virtual_devices(requested)
        return self.fw

    # ------------------------------------------------------------ primitives

    def is_tensor(self, x: Any) -> bool:
        tf = self.fw
        return isinstance(x, (tf.Tensor, tf.Variable))

    def is_native_device(self, obj: Any) -> bool:
        return isinstance(obj, TFDevice)

    def accelerator_count(self) -> int:
        # Lists physical devices only; the runtime (and its logical devices) stays uninitialised.
        return len(self.fw.config.list_physical_devices("GPU"))

    def make_native_device(self, kind: str, index: int) -> Any:
        # Import tensorflow now: a TFDevice made while it is unimported could not be
        # recognised by dispatch (which only asks frameworks that are loaded).
        self.fw
        if kind == "gpu":
            requested = config.virtual_device_count()
            if requested:
                self.runtime()
                return self._native(f"/CPU:{index + 1}")
            return self._native(f"/GPU:{index}")
        return self._native(f"/CPU:{index}")

    def _native(self, name: str) -> TFDevice:
        native = self._natives.get(name)
        if native is None:
            native = self._natives.setdefault(name, TFDevice(name))
        return native

    def describe(self, native: Any) -> Device:
        return self._describe_name(native.name)

    def _describe_name(self, name: str) -> Device:
        described = self._described.get(name)
        if described is None:
            kind, index, _ = parse_spec(name)
            native = self._native(f"/{kind.upper()}:{index}")
            if kind == "cpu" and 1 <= index <= self._virtual:
                described = Device("gpu", index - 1, native=native, backend=self.name, virtual=True)
            else:
                described = Device(kind, index, native=native, backend=self.name)
            self._described[name] = described
        return described

    def tensor_device(self, x: Any) -> Device:
        name = x.device
        if not name:
            raise DevshimError(
                f"This {type(x).__name__} has no device yet: it is a symbolic tensor inside "
                f"tf.function (or a graph), placed only when the graph runs. Ask ds.device_of "
                f"about eager tensors, or place ops explicitly with `with ds.try_gpu():`."
            )
        return self._describe_name(name)

    def has_cpu(self, index: int) -> bool:
        tf = self.fw
        host = tf.config.list_physical_devices("CPU")
        logical = tf.config.get_logical_device_configuration(host[0]) if host else None
        real = (len(logical) - self._virtual) if logical else len(host)
        return index < real

    # ------------------------------------------------------------ copies

    def copy_to(self, x: Any, native: Any, non_blocking: bool) -> Any:
        tf = self.runtime()
        if isinstance(x, tf.Variable):
            x = tf.convert_to_tensor(x)  # reads the value; the tape records the read
        target = self.describe(native)
        source = self.tensor_device(x) if x.device else None
        # int32 tensors stay in host memory even on a GPU, so treat them as host-backed.
        host_int32 = x.dtype == tf.int32
        with tf.device(native.name):
            if source is not None and not host_int32 and not _shares_memory(source, target):
                # Distinct memories: the transfer itself allocates new storage on the target.
                return tf.identity(x)
            # Same memory (same device, or two host-backed devices): TensorFlow would
            # hand over the same buffer, so copy explicitly.
            try:
                y = self._copy_fn()(x)
            except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError):
                if target.kind != "gpu" or target.virtual:
                    raise DevshimError(
                        f"TensorFlow cannot copy a {x.dtype.name} tensor; devshim copies "
                        f"numbers, bool and strings. Convert it to one of those first."
                    ) from None
                y = None  # no kernel for this dtype on the GPU and soft placement is off
        if y is None or (source is not None and self.tensor_device(y) != target):
            y = self._copy_through_host(tf, x, native)
        return y

    def _copy_fn(self):
        if self._deep_copy is None:
            tf = self.fw

            @tf.custom_gradient
            def deep_copy(x):
                return tf.raw_ops.DeepCopy(x=x), lambda dy: dy

            self._deep_copy = deep_copy
        return self._deep_copy

    def _copy_through_host(self, tf: Any, x: Any, native: Any) -> Any:
        # A GPU without a DeepCopy kernel for this dtype (bool, int16, complex...):
        # GPU -> host -> GPU is two real transfers, so the result is new storage.
        with tf.device("/CPU:0"):
            host = tf.identity(x)
        with tf.device(native.name):
            y = tf.identity(host)
        if self.tensor_device(y) != self.describe(native):
            raise DevshimError(
                f"TensorFlow placed a {x.dtype.name} copy on {y.device} instead of {native}: "
                f"it has no kernel for that dtype there. Cast it to a supported dtype first."
            )
        return y

    def move_if_needed(self, x: Any, native: Any) -> Any:
        if x.device and self.tensor_device(x) == self.describe(native):
            return x
        return self.copy_to(x, native, False)

    def tensor_to_numpy(self, x: Any) -> Any:
        import numpy as np

        value = x.numpy()
        # EagerTensor.numpy() copies arrays today, but 0-d tensors give a NumPy scalar and
        # np.asarray(x) would share memory on the CPU: make sure the caller owns the result.
        if isinstance(value, np.ndarray) and value.flags.owndata and value.base is None:
            return value
        return np.array(value, copy=True)

    def synchronize(self, native: Optional[Any]) -> None:
        tf = self.fw
        sync = getattr(getattr(tf.test, "experimental", None), "sync_devices", None)
        if sync is not None:
            sync()  # TensorFlow waits on every device; it has no per-device call

    def device_details(self) -> List[Dict[str, Any]]:
        tf = self.fw
        details: List[Dict[str, Any]] = [{"device": "cpu:0", "name": "host CPU (/CPU:0)"}]
        count = self.num_gpus()
        if count and config.virtual_device_count():
            for i in range(count):
                details.append({
                    "device": f"gpu:{i}",
                    "name": f"virtual GPU in host memory (logical /CPU:{i + 1})",
                    "virtual": True,
                })
            return details
        for i, physical in enumerate(tf.config.list_physical_devices("GPU")[:count]):
            entry: Dict[str, Any] = {"device": f"gpu:{i}", "name": f"/GPU:{i}"}
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
            wanted = [tf.config.LogicalDeviceConfiguration() for _ in range(count + 1)]
            current = tf.config.get_logical_device_configuration(host)
            if current is None or len(current) != count + 1:
                try:
                    tf.config.set_logical_device_configuration(host, wanted)
                except RuntimeError:
                    raise BackendError(
                        f"{count} virtual GPUs were asked for ({config.VIRTUAL_DEVICES_VAR} or "
                        f"ds.testing.virtual_devices({count})), but TensorFlow has already "
                        f"initialised its devices, so it is too late to add them. Set "
                        f"{config.VIRTUAL_DEVICES_VAR}={count} before starting Python, or call "
                        f"ds.testing.virtual_devices({count}) before TensorFlow creates any "
                        f"tensor or runs any op."
                    ) from None
            self._described.clear()
            self._virtual = count


def _shares_memory(a: Device, b: Device) -> bool:
    """Whether two devices' tensors live in the same memory (host-backed, or one GPU)."""
    host = lambda d: d.kind == "cpu" or d.virtual  # noqa: E731
    return a == b or (host(a) and host(b))

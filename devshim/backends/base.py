"""The device contract every backend's `core.py` implements.

A backend's `core.py` holds one subclass of `Backend`. It never imports
its framework at module level: `self.fw` imports it the first time a method
needs it. Tensor ownership (`is_tensor`) is only ever asked once the
framework is in `sys.modules`, so detection is free.

Subclasses implement the abstract methods, which work on single tensors
("leaves") and on the framework's native device objects. Everything users see
(nesting, spec strings, range checks, `DEVSHIM_DEVICE`, virtual devices,
the cached fast paths) is written once, here and in `devshim/api.py`.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import warnings
from abc import ABC, abstractmethod
from typing import Any

from devshim import settings, transfer
from devshim.guard import marker
from devshim._trace import trace_constant
from devshim._device import ACCEPTED_SPECS, Device, describe_native, parse_spec, register_platform
from devshim.backends.out_of_memory import raise_if_out_of_memory
from devshim.errors import (
    BackendError, DeviceUnavailableError, InvalidDeviceError, SharedDeviceWarning, UnsupportedValueError,
    VirtualDeviceCountError,
)

__all__ = ["Backend", "DeviceTable", "trace_constant"]

_TARGET_CACHE_LIMIT = 256
_UNKNOWN = object()  # an accelerator platform not looked for yet
_shared_warned = False  # SharedDeviceWarning was issued (once per process, until settings change)


class DeviceTable(dict):
    """What a tensor's device attribute says -> its `ds.Device`; `attr` names the attribute.

    A backend whose tensors carry a hashable device attribute (torch's `x.device`,
    TensorFlow's `x.device` name, MXNet's `x.ctx`) keeps its descriptions in one
    of these, filling it as it describes devices, and hands it to `ds.device_of`,
    which then answers with one lookup and no call into the backend.

    `exact` (opt-in): a tensor is on a target device exactly when the Device
    its attribute maps to is the target's own Device object (torch, NumPy: where
    `same_place` is device equality). Then `targets` maps each resolved spec
    to that object, and `ds.copy_if_needed` answers "already there" with two
    lookups and an `is`.

    `natives` maps the same attribute values to the framework's own device
    objects, which `ds.device_of` returns; it is filled as `device_of` meets them.
    `attribute_is_native` (opt-in): the attribute's value *is* the framework's own
    device object (torch's `x.device`, NumPy 2's `"cpu"`), so `ds.device_of`
    returns it as it is, with no lookup at all.
    `home` (opt-in, exact tables): the one Device every tensor of the table's types
    lives on (NumPy's host), so "already there" needs no read of the attribute at all.
    """

    __slots__ = ("attr", "exact", "targets", "natives", "attribute_is_native", "home")

    def __init__(self, attr: str, exact: bool = False, attribute_is_native: bool = False,
                 home=None) -> None:
        super().__init__()
        self.attr = attr
        self.exact = exact
        self.attribute_is_native = attribute_is_native
        self.home = home
        self.targets: dict = {}  # spec -> the Device of its resolved native (exact tables only)
        self.natives: dict = {}  # attribute value -> the native device object

    def clear(self) -> None:
        super().clear()
        self.targets.clear()
        self.natives.clear()


class Backend(ABC):
    """One framework's implementation of the devshim device contract.

    `spec` (a `BackendSpec`) is the backend's declaration row, from its
    package's `__init__.py`; `name` is `spec.name`.

    Example:
        >>> bk = ds.get_backend("torch")
        >>> bk.name, bk.cpu()
        ('torch', device(type='cpu'))
    """

    spec: Any = None  # the BackendSpec from the backend package's __init__.py
    _described: Any = None  # the backend's DeviceTable (native device -> Device), if it keeps one
    _virtual = 0  # virtual accelerators presented now (backends that have them set it)
    name = ""
    #: The registry that made this adapter (None for one made by hand): how the contract asks
    #: about the other backends without this module importing the registry above it.
    peers = None
    #: The most virtual accelerators this backend can present (None: no limit of its own).
    max_virtual_devices = None
    #: True when waiting is per value (`wait(x)` on each output, JAX's
    #: `block_until_ready`); False when it is per device (`synchronize`).
    waits_per_value = False

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.spec is not None:
            cls.name = cls.spec.name

    def __init__(self) -> None:
        # spec -> native device, for specs already resolved and checked. Cleared (never
        # replaced: the fast paths hold it) whenever settings change.
        self._targets: dict = {}
        self._platform = _UNKNOWN

    # ------------------------------------------------------------ detection

    @classmethod
    def is_installed(cls) -> bool:
        """Whether the framework can be imported, found without importing it."""
        return cls.spec.is_installed()

    @classmethod
    def is_loaded(cls) -> bool:
        """Whether the framework is imported already (so its tensors may exist)."""
        return cls.spec.is_loaded()

    @classmethod
    def version(cls):
        """The installed framework's version, read from package metadata (no import)."""
        return cls.spec.version()

    @property
    def fw(self):
        """The framework module, imported on first use."""
        state = vars(self)
        module = state.get("_fw")
        if module is None:  # a race here only imports twice, which Python makes safe
            module = state["_fw"] = importlib.import_module(self.spec.import_name)
            self.framework_imported(module)
        return module

    def framework_imported(self, module) -> None:
        """Called when this adapter first reaches its framework (twice at most, in a race): where
        a backend tells the framework what it must know of devshim. Nothing by default.

        Example:
            >>> get_backend("tensorflow").fw    # AutoGraph now leaves devshim's code alone
        """

    # ------------------------------------------------ framework primitives

    @abstractmethod
    def is_tensor(self, x) -> bool:
        """Whether `x` is a tensor of this framework. Called only once loaded."""

    def is_tensor_type(self, kind: type):
        """Whether every instance of class `kind` is a tensor of this framework (True or
        False), or None when the class alone does not say. Backends whose `is_tensor` is one
        `isinstance` answer, so that torch.compile can learn a type without tracing devshim."""
        return None

    @abstractmethod
    def is_native_device(self, obj) -> bool:
        """Whether `obj` is one of this framework's device objects. Called only once loaded."""

    @abstractmethod
    def accelerator_count(self) -> int:
        """How many real accelerators the framework sees (ignores DEVSHIM_DEVICE)."""

    @abstractmethod
    def make_native_device(self, kind: str, index: int):
        """The framework's device object for `kind`/`index`; no range checks."""

    def describe(self, native) -> Device:
        """The neutral Device for one of this framework's device objects. Default, for a backend
        that keeps a `_described` table keyed by its device objects: `_describe(native)`, worked
        out once per device object."""
        described = self._described.get(native)
        if described is None:
            described = self._described[native] = self._describe(native)
        return described

    def _describe(self, native) -> Device:
        raise BackendError(f"{type(self).__name__} defines neither describe(native) nor _describe(native) with a "
                           f"_described table; a backend must define one of them (docs/adapters.md).")

    @abstractmethod
    def tensor_device(self, x) -> Device:
        """The neutral Device a tensor of this framework lives on."""

    @abstractmethod
    def copy_to(self, x, native, non_blocking: bool):
        """A copy of `x` on `native` in new storage, recorded by autograd."""

    @abstractmethod
    def tensor_to_numpy(self, x):
        """A NumPy array holding a copy of `x`'s values, never sharing its memory."""

    # ------------------------------------------------ optional primitives

    def same_place(self, x, native) -> bool:
        """Whether tensor `x` already lives on `native` (`copy_if_needed`'s test).

        Backends override this with the framework's cheapest exact check.
        """
        return self.tensor_device(x) == self.describe(native)

    def accelerator_platform(self):
        """The accelerator's platform name ("cuda", "mps", ...) or None without one: what
        `find_platform` finds, looked for once (until `reset`) and registered, so that a spec
        such as "rocm:1" reads as one."""
        platform = self._platform
        if platform is _UNKNOWN:
            platform = self._platform = self.find_platform()
            if platform is not None:
                register_platform(platform)
        return platform

    def find_platform(self):
        """The accelerator's platform name, looked for (`accelerator_platform` keeps it), or
        None without one. Default: "cuda" when `accelerator_count()` finds any (TensorFlow's and
        MXNet's GPUs are CUDA's)."""
        return "cuda" if self.accelerator_count() else None

    def synchronize(self, native) -> None:
        """Wait for work queued on `native` (all devices when None). Host-only: no-op."""

    def wait(self, x) -> None:
        """Wait until tensor `x` is computed. Default: wait for its device."""
        self.synchronize(self.tensor_device(x).native)

    def array_namespace(self, x):
        """The module whose functions take `x` (`ds.array_module`): NumPy-like, ideally the
        array-API namespace of the framework's arrays. Default: the one `x` names itself
        (`x.__array_namespace__()`, the array API's own query); without it, a refusal."""
        namespace = getattr(x, "__array_namespace__", None)
        if namespace is not None:
            return namespace()
        raise UnsupportedValueError(
            f"The {self.name} backend has no array module for {type(x).__name__} values, so "
            f"ds.array_module cannot answer. Convert the value first, e.g. with ds.to_numpy(x)."
        )

    def device_details(self) -> list:
        """What `devshim info` prints about each device: at least `device` and `name`."""
        return [{"device": str(self.describe(native)), "name": str(native)} for native in self.devices()]

    def enable_virtual_devices(self, count: int) -> None:
        """Make `count` virtual accelerators exist. Backends whose spec says they can override this."""

    def runtime(self):
        """The framework's module, with the virtual devices settings ask for configured first
        (`enable_virtual_devices`): what a backend whose framework fixes its devices when it
        initialises (JAX, TensorFlow) calls before anything that may make it do so."""
        requested = settings.virtual_device_count()
        if requested and requested != self._virtual and not settings.accelerators_hidden():
            self.enable_virtual_devices(requested)
        return self.fw

    def check_virtual_count(self, count: int) -> int:
        """`count` when this backend can present that many virtual accelerators; else
        `VirtualDeviceCountError` with the range (`max_virtual_devices`)."""
        limit = self.max_virtual_devices
        if limit is not None and count > limit:
            raise VirtualDeviceCountError(
                f"{settings.VIRTUAL_DEVICES_VAR}={count} (or ds.testing.virtual_devices({count})) is more "
                f"virtual GPUs than the {self.name} backend can present: it takes 0 to {limit}"
                f"{self.virtual_limit_reason}. Ask for {limit} or fewer."
            )
        return count

    #: Why `max_virtual_devices` is what it is (part of the error message).
    virtual_limit_reason = ""

    def has_cpu(self, index: int) -> bool:
        """Whether cpu:index exists (frameworks with several CPU devices override)."""
        return index == 0

    def check_platform(self, platform: str) -> None:
        """Called when a spec names a platform ("cuda", "mps"); refuse one this machine lacks."""
        actual = self.accelerator_platform()
        if actual is not None and platform != actual:
            raise DeviceUnavailableError(
                f"{platform!r} was asked for, but the {self.name} backend's accelerator here is "
                f"{actual!r}. Write 'gpu' (or ds.try_gpu()) to mean whichever accelerator is present."
            )
        if actual is None and platform != "cuda":
            # Virtual GPUs stand in for 'gpu' and 'cuda' (the default accelerator), never for a
            # platform this machine does not have: "mps" must not quietly become virtual gpu:0.
            virtual = settings.virtual_device_count()
            also = (f" The {virtual} virtual GPUs ({settings.VIRTUAL_DEVICES_VAR}={virtual}) are "
                    f"'gpu:0' ... 'gpu:{virtual - 1}'." if virtual else "")
            raise DeviceUnavailableError(
                f"{platform!r} was asked for, but this machine has no {platform} device for the "
                f"{self.name} backend.{also} Write 'gpu' (or ds.try_gpu()) to mean whichever "
                f"accelerator is present."
            )

    def copier(self, native, non_blocking: bool):
        """`x -> copy_to(x, native, non_blocking)` for the leaves of one nest; backends whose
        copy is one method call return that method, saving a Python call per leaf."""
        copy_to = self.copy_to
        return lambda x: copy_to(x, native, non_blocking)

    def copy_if_needed(self, x, native):
        """`x` itself when it already lives on `native`, else a copy there (one tensor)."""
        return x if self.same_place(x, native) else self.copy_to(x, native, False)

    def sum_across_processes(self, total):
        """`total` summed over every process of the framework's distributed job, as a new
        tensor on `total`'s device; `total` itself when no process group is running
        (`ds.allreduce`'s second level). Backends with such an engine override this."""
        return total

    def narrow(self, x, start: int, stop: int):
        """Rows `start:stop` of `x`, computed where `x` lives (a view where the framework has them);
        the index names every axis, as the array API asks (`x[start:stop, ...]`)."""
        return x[start:stop, ...]

    def on_device(self, native):
        """A `with` block in which the framework's ops run on `native` (TensorFlow needs
        one: it runs an op without a scope on its default device). Others: a no-op."""
        return _NO_SCOPE

    def restart_trace(self) -> None:
        """Start the framework's running trace over, when devshim has just filled its dispatch
        tables inside it (the trace read them empty). A backend whose framework has no such
        tracer does nothing; the caller then raises `FirstCallInTraceError`."""

    def reset(self) -> None:
        """Forget everything cached from settings or the machine (after `settings.reload()`)."""
        global _shared_warned
        _shared_warned = False
        self._targets.clear()
        self._platform = _UNKNOWN
        if self._described is not None:
            self._described.clear()
        table = self.device_table()
        if table is not None:
            table.targets.clear()

    # -------------------------------------------------- public operations

    def num_gpus(self) -> int:
        """Accelerators visible through devshim (0 under DEVSHIM_DEVICE=cpu)."""
        if settings.accelerators_hidden():
            return 0
        virtual = settings.virtual_device_count()
        if virtual:
            if not self.spec.virtual_devices:
                self._refuse_virtual_devices(virtual)
            self.enable_virtual_devices(self.check_virtual_count(virtual))
            return virtual
        return self.accelerator_count()

    def _refuse_virtual_devices(self, count: int) -> None:
        can = self.peers.virtual_capable_backends() if self.peers is not None else []
        raise BackendError(
            f"The {self.name} backend cannot present virtual devices "
            f"({settings.VIRTUAL_DEVICES_VAR}={count} was asked for). Backends that can: "
            f"{', '.join(can) or 'none installed'}. "
            f"Unset {settings.VIRTUAL_DEVICES_VAR}, or pick one of those with DEVSHIM_BACKEND."
        )

    def cpu(self):
        return self.make_native_device("cpu", 0)

    def gpu(self, i=None):
        if i is None:
            own = self.process_gpu_index()
            if own is not None:
                return self.make_native_device("gpu", own)
            i = 0  # no accelerator: say so below
        _check_index(i)
        count = self.num_gpus()
        if i >= count:
            hidden = " (hidden by DEVSHIM_DEVICE=cpu)" if settings.accelerators_hidden() else ""
            raise DeviceUnavailableError(
                f"gpu:{i} is not available: the {self.name} backend sees {count} "
                f"GPU{'s' if count != 1 else ''}{hidden}. Use ds.try_gpu({i}) to fall back to "
                f"the CPU, or ds.try_all_gpus() to use whatever is there.{self._virtual_hint(i)}"
            )
        return self.make_native_device("gpu", i)

    def _virtual_hint(self, index: int) -> str:
        """How to have gpu:`index` without a GPU (virtual GPUs), where this backend can."""
        var, have = settings.VIRTUAL_DEVICES_VAR, settings.virtual_device_count()
        if not self.spec.virtual_devices:
            peers = self.peers.specs() if self.peers is not None else {}
            can = [name for name, spec in peers.items() if spec.virtual_devices]
            return (f" The {self.name} backend has no virtual GPUs; {var}=2 presents two on "
                    f"{', '.join(can)} (installed, and selected with DEVSHIM_BACKEND)." if can else "")
        if have:
            return f" {var}={have} presents {have} virtual GPU{'s' if have != 1 else ''}: set it to {index + 1} or more."
        lacking = "a GPU" if self.accelerator_count() == 0 else "that many GPUs"
        return (f" Or set {var}={max(2, index + 1)}: virtual GPUs backed by host memory, so GPU code runs and is "
                f"tested without {lacking} (docs/virtual-devices.md).")

    def try_gpu(self, i=None):
        if i is None:
            own = self.process_gpu_index()
            return self.cpu() if own is None else self.make_native_device("gpu", own)
        _check_index(i)
        return self.make_native_device("gpu", i) if i < self.num_gpus() else self.cpu()

    def try_all_gpus(self) -> list:
        count = self.num_gpus()
        if count:
            launch = self.launch()
            if launch is not None and launch.one_device_per_process:
                return [self.make_native_device("gpu", self._own_index(launch, count))]
        return [self.make_native_device("gpu", i) for i in range(count)] or [self.cpu()]

    # -------------------------------------------------- one device per process

    def process_gpu_index(self):
        """The GPU this process uses when no index is named, or None without a GPU.

        Under a launcher that started several processes it is `local_rank % num_gpus()`
        (a launcher that gives each process one device through `CUDA_VISIBLE_DEVICES`
        leaves one visible: index 0); otherwise 0. `DEVSHIM_DEVICE=cpu` means no GPU.

        Example:
            >>> ds.get_backend().process_gpu_index()   # LOCAL_RANK=1, two GPUs
            1
        """
        count = self.num_gpus()
        if not count:
            return None
        launch = self.launch()
        if launch is None or not launch.one_device_per_process:
            return 0
        return self._own_index(launch, count)

    def launch(self):
        """Which process of a job this is (a `settings.Launch`), or None: the launcher's
        variables (`settings.launcher()`), or what the framework itself knows of the job
        (JAX's `jax.distributed`), for backends whose framework can say.

        Example:
            >>> ds.get_backend().launch()      # under torchrun --nproc_per_node 2
            Launch(name='torchrun', local_rank=1, rank=1, world_size=2, local_world_size=2, ...)
        """
        return settings.launcher()

    def visibility_narrowed(self) -> bool:
        """Whether the framework was told to show this process fewer accelerators than the
        machine has (TensorFlow's `set_visible_devices`, as Horovod does): the process was
        given its device. Backends that can tell override this."""
        return False

    def _own_index(self, launch, count: int) -> int:
        if launch.local_processes > count and not _shared_warned:
            virtual = settings.virtual_device_count()
            given = not virtual and (launch.given_one_device or self.visibility_narrowed())
            if not given:  # a launcher that chose each process's device knows better than we can
                self._warn_shared(launch, count, bool(virtual))
        return launch.local_rank % count

    def _warn_shared(self, launch, count: int, virtual: bool) -> None:
        global _shared_warned
        _shared_warned = True
        n = launch.local_processes
        what = f"{count} {'virtual ' if virtual else ''}GPU{'s' if count != 1 else ''}"
        warnings.warn(
            f"{n} processes on this machine share {what} of the {self.name} backend: under "
            f"{launch.name} each process takes gpu:(local rank % {count}) (this one, "
            f"{launch.variable}={launch.local_rank}, takes gpu:{launch.local_rank % count}), so some "
            f"processes share a GPU. Start at most "
            f"{count} process{'es' if count != 1 else ''} per machine (torchrun --nproc_per_node {count}), "
            f"or set DEVSHIM_DEVICE=cpu to keep every process on the CPU.",
            SharedDeviceWarning, stacklevel=_caller_level(),
        )

    def devices(self) -> list:
        return [self.cpu()] + [self.make_native_device("gpu", i) for i in range(self.num_gpus())]

    def device(self, spec):
        """The native device for any accepted spec, checked to exist.

        Specs (strings, `ds.Device`, another framework's device objects) name
        a place by kind and index: "gpu:1" is this backend's GPU 1, virtual or
        real. A native device object of this framework names one physical
        device exactly: a real GPU the machine does not have is unavailable
        even when virtual devices are on.
        """
        if self.is_loaded() and self.is_native_device(spec):
            self._check_native(spec)
            return spec
        kind, index, platform = self._read_spec(spec)
        if platform is not None and kind == "gpu":
            self.check_platform(platform)
        self._check_exists(kind, index)
        return self.make_native_device(kind, index)

    def target(self, spec):
        """`device(spec)`, remembered for hashable specs until settings change.

        This is what `to_device` and `copy_if_needed` resolve their
        target with: the same spec comes back call after call.
        """
        try:
            return self._targets[spec]
        except (KeyError, TypeError):
            pass
        native = self.device(spec)
        if self._cacheable(spec):
            targets = self._targets
            if len(targets) >= _TARGET_CACHE_LIMIT:
                targets.clear()
            targets[spec] = native
            table = self.device_table()
            if table is not None and table.exact:
                if len(table.targets) >= _TARGET_CACHE_LIMIT:
                    table.targets.clear()
                table.targets[spec] = self.describe(native)
        return native

    def _cacheable(self, spec) -> bool:
        try:
            hash(spec)
        except TypeError:
            return False
        return True

    def native_for(self, device: Device):
        """The native object for a `ds.Device` of this backend (one rebuilt by pickle)."""
        if device.kind == "gpu" and device.virtual != bool(settings.virtual_device_count()):
            what = "a virtual" if device.virtual else "a real"
            raise DeviceUnavailableError(
                f"{device!r} is {what} GPU, which the {self.name} backend does not present in "
                f"this process ({settings.VIRTUAL_DEVICES_VAR}="
                f"{settings.virtual_device_count()}). Ask ds.device('{device}') for this "
                f"process's own gpu:{device.index}."
            )
        return self.device(device)

    def _read_spec(self, spec) -> tuple:
        if isinstance(spec, Device):
            return spec.kind, spec.index, None
        if type(spec) is str:
            return parse_spec(spec)
        described = describe_native(spec)  # another framework's device object
        if described is not None:
            return described.kind, described.index, None
        if isinstance(spec, str):  # str subclasses that are no framework's device: numpy.str_
            return parse_spec(str(spec))
        raise InvalidDeviceError(
            f"Cannot use {spec!r} ({type(spec).__name__}) as a device. Accepted forms: {ACCEPTED_SPECS}."
        )

    def _check_native(self, native) -> None:
        """A native device must exist exactly: its own kind, index, and virtual flag."""
        described = self.describe(native)
        if described.kind == "gpu" and not described.virtual:
            count = 0 if settings.accelerators_hidden() else self.accelerator_count()
            if described.index >= count:
                hidden = " (hidden by DEVSHIM_DEVICE=cpu)" if settings.accelerators_hidden() else ""
                virtual = settings.virtual_device_count()
                also = (f" Virtual GPUs are on ({settings.VIRTUAL_DEVICES_VAR}={virtual}); use "
                        f"ds.gpu({described.index}) or the spec 'gpu:{described.index}' for virtual "
                        f"gpu:{described.index}." if virtual else "")
                raise DeviceUnavailableError(
                    f"{native!r} is a real GPU, and the {self.name} backend sees {count} real "
                    f"GPU{'s' if count != 1 else ''} on this machine{hidden}.{also} Use ds.try_gpu() "
                    f"to fall back to the CPU."
                )
            return
        self._check_exists(described.kind, described.index)

    def _check_exists(self, kind: str, index: int) -> None:
        if kind == "gpu":
            self.gpu(index)
        elif kind == "meta":
            self.make_native_device("meta", 0)  # backends without a meta device raise here
        elif index != 0 and not self.has_cpu(index):
            raise DeviceUnavailableError(
                f"cpu:{index} is not available on the {self.name} backend. Use ds.cpu(), or "
                f"ds.devices() to list the devices it has."
            )

    def _no_meta(self):
        return DeviceUnavailableError(
            f"The {self.name} backend has no data-less 'meta' device; that is a PyTorch device. "
            f"Use ds.cpu() or ds.try_gpu()."
        )

    # -------------------------------------------------- fast paths (dispatch.FastPaths holds them)

    def device_table(self):
        """The backend's `DeviceTable`, or None when its tensors have no such attribute.
        Default: `_described`, the table a backend makes in its `__init__` (`reset` clears it)."""
        return self._described

    def neutral_device_fn(self):
        """`x -> Device` for this backend's tensors: what `ds.neutral_device` calls when its
        table has no entry."""
        return self.tensor_device

    def native_device_of(self, x):
        """The framework's own device object of tensor `x`: what `ds.device_of` returns, which
        goes back into the framework's `device=`. Backends whose tensors can be traced without a
        device override this (JAX answers None inside `jax.jit`, as array-api-compat does)."""
        return self.tensor_device(x).native

    def native_device_of_fn(self):
        """`x -> native device` for this backend's tensors: what `ds.device_of` calls when its
        table has no entry yet. It records the answer in the `DeviceTable`'s `natives`."""
        native_of, table = self.native_device_of, self.device_table()
        if table is None:
            return native_of
        natives, attr = table.natives, table.attr

        def device_of(x):
            native = native_of(x)
            if native is not None:
                try:
                    natives[getattr(x, attr)] = native
                except (AttributeError, TypeError):  # no attribute, or an unhashable one
                    pass
            return native

        return device_of

    def copy_fn(self):
        """`(x, spec, non_blocking) -> copy`: what `ds.to_device` calls for one tensor."""
        return self._one_tensor(if_needed=False)

    def copy_if_needed_fn(self):
        """`(x, spec) -> x or a copy`: what `ds.copy_if_needed` calls for one tensor."""
        return self._one_tensor(if_needed=True)

    def _one_tensor(self, if_needed: bool):
        """The one-tensor path of `copy_fn` and `copy_if_needed_fn`: the spec's native device
        from the targets resolved before, then (`if_needed`) "already there?", then the copy.

        With no transfer guard watching there is nothing to mark, so the copy calls the adapter
        straight away; otherwise it runs inside `devshim.transfer.explicit()`, which marks it as
        asked for. A copy that fails names its device's out-of-memory error from this adapter.
        """
        targets, resolve, same_place, copy_to, adapter = (
            self._targets, self.target, self.same_place, self.copy_to, self)
        explicit, call = transfer.explicit, "copy_if_needed" if if_needed else "to_device"

        def one_tensor(x, device, non_blocking=False):
            try:
                native = targets[device]
            except (KeyError, TypeError):  # resolved outside the handler: no chained traceback
                native = None
            if native is None:
                native = resolve(device)
            if if_needed and same_place(x, native):
                return x
            try:  # costs nothing until something is raised
                if marker.watchers:
                    with explicit():
                        return copy_to(x, native, non_blocking)
                return copy_to(x, native, non_blocking)
            except Exception as error:
                raise_if_out_of_memory(error, call, x, (device,), adapters=(adapter,))
                raise

        return one_tensor

    def __repr__(self) -> str:
        return f"<devshim {self.name} backend>"


# Resolving a spec reads settings and may import a framework's device module: torch.compile runs
# it outside the trace and keeps the native device it returns (the spec is a constant there).
trace_constant(Backend.target)


_NO_SCOPE = contextlib.nullcontext()


def _caller_level() -> int:
    """The `stacklevel` that points a warning at the first frame outside devshim."""
    package = __file__.rsplit("backends", 1)[0]
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _check_index(i) -> None:
    if not isinstance(i, int) or isinstance(i, bool) or i < 0:
        raise InvalidDeviceError(f"A GPU index must be a non-negative int, not {i!r}.")

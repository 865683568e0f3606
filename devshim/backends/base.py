"""The contract every framework adapter implements.

An adapter is one small class per framework. It must never import its
framework at module level: the framework is imported the first time a method
needs it (``self.fw``). Tensor ownership (``is_tensor``) is only ever asked
once the framework is already in ``sys.modules``, so detection is free.

Subclasses implement the abstract methods, which work on single tensors
("leaves") and on the backend's native device objects. Everything users see
(nesting, spec strings, range checks, ``DEVSHIM_DEVICE``, virtual devices)
is implemented here once, on top of them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Dict, List, Optional

from devshim import config
from devshim.device import Device, parse_spec
from devshim.errors import BackendError, DeviceUnavailableError, InvalidDeviceError


class Backend(ABC):
    """One framework's implementation of the devshim contract.

    Class attributes every adapter sets:
      ``name``       the canonical backend name ("torch").
      ``module``     the top-level import name of the framework ("torch").
      ``pip_extra``  the devshim extra that installs it ("torch").
      ``supports_virtual_devices`` whether DEVSHIM_VIRTUAL_DEVICES can work.
      ``distributions`` the pip packages that may provide it (default: ``module``).
    """

    name: ClassVar[str]
    module: ClassVar[str]
    pip_extra: ClassVar[str]
    supports_virtual_devices: ClassVar[bool] = False
    distributions: ClassVar[tuple] = ()

    # ------------------------------------------------------------ detection

    @classmethod
    def is_installed(cls) -> bool:
        """Whether the framework can be imported, found without importing it."""
        try:
            return importlib.util.find_spec(cls.module) is not None
        except (ImportError, ValueError):
            return False

    @classmethod
    def is_loaded(cls) -> bool:
        """Whether the framework is imported already (so its tensors may exist)."""
        return cls.module in sys.modules

    @property
    def fw(self) -> Any:
        """The framework module, imported on first use."""
        module = self.__dict__.get("_fw")
        if module is None:  # a race here only imports twice, which Python makes safe
            module = self.__dict__["_fw"] = importlib.import_module(self.module)
        return module

    @classmethod
    def version(cls) -> Optional[str]:
        """The installed framework's version, read from package metadata (no import)."""
        from importlib import metadata

        for dist in cls.distributions or (cls.module,):
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        return None

    # ------------------------------------------------ framework primitives

    @abstractmethod
    def is_tensor(self, x: Any) -> bool:
        """Whether ``x`` is a tensor of this framework. Called only once loaded."""

    @abstractmethod
    def is_native_device(self, obj: Any) -> bool:
        """Whether ``obj`` is one of this framework's device objects. Called only once loaded."""

    @abstractmethod
    def accelerator_count(self) -> int:
        """How many real accelerators the framework sees (ignores DEVSHIM_DEVICE)."""

    @abstractmethod
    def make_native_device(self, kind: str, index: int) -> Any:
        """The framework's device object for ``kind``/``index``; no range checks."""

    @abstractmethod
    def describe(self, native: Any) -> Device:
        """The neutral Device for one of this framework's device objects."""

    @abstractmethod
    def tensor_device(self, x: Any) -> Device:
        """The neutral Device a tensor of this framework lives on."""

    @abstractmethod
    def copy_to(self, x: Any, native: Any, non_blocking: bool) -> Any:
        """A copy of ``x`` on ``native`` in new storage, recorded by autograd."""

    @abstractmethod
    def tensor_to_numpy(self, x: Any) -> Any:
        """A NumPy array holding a copy of ``x``'s values, never sharing its memory."""

    def move_if_needed(self, x: Any, native: Any) -> Any:
        """``x`` itself when it already lives on ``native``, else ``copy_to``."""
        if self.tensor_device(x) == self.describe(native):
            return x
        return self.copy_to(x, native, False)

    def synchronize(self, native: Optional[Any]) -> None:
        """Wait for work queued on ``native`` (all devices when None). Host-only: no-op."""

    def device_details(self) -> List[Dict[str, Any]]:
        """What ``devshim info`` prints about each device: at least ``device`` and ``name``."""
        return [
            {"device": str(self.describe(native)), "name": str(native)}
            for native in self.devices()
        ]

    def enable_virtual_devices(self, count: int) -> None:
        """Make ``count`` virtual accelerators exist. Adapters that can, override this."""
        from devshim.backends import virtual_capable_backends

        raise BackendError(
            f"The {self.name} backend cannot present virtual devices "
            f"({config.VIRTUAL_DEVICES_VAR}={count} was asked for). Backends that can: "
            f"{', '.join(virtual_capable_backends()) or 'none installed'}. "
            f"Unset {config.VIRTUAL_DEVICES_VAR}, or pick one of those with DEVSHIM_BACKEND."
        )

    # -------------------------------------------------- public operations

    def num_gpus(self) -> int:
        """Accelerators visible through devshim (0 under DEVSHIM_DEVICE=cpu)."""
        if config.accelerators_hidden():
            return 0
        virtual = config.virtual_device_count()
        if virtual:
            self.enable_virtual_devices(virtual)
            return virtual
        return self.accelerator_count()

    def cpu(self) -> Any:
        return self.make_native_device("cpu", 0)

    def gpu(self, i: int = 0) -> Any:
        _check_index(i)
        count = self.num_gpus()
        if i >= count:
            hidden = " (hidden by DEVSHIM_DEVICE=cpu)" if config.accelerators_hidden() else ""
            raise DeviceUnavailableError(
                f"gpu:{i} is not available: the {self.name} backend sees {count} "
                f"GPU{'s' if count != 1 else ''}{hidden}. Use ds.try_gpu({i}) to fall back to "
                f"the CPU, or ds.try_all_gpus() to use whatever is there."
            )
        return self.make_native_device("gpu", i)

    def try_gpu(self, i: int = 0) -> Any:
        _check_index(i)
        return self.make_native_device("gpu", i) if i < self.num_gpus() else self.cpu()

    def try_all_gpus(self) -> List[Any]:
        count = self.num_gpus()
        return [self.make_native_device("gpu", i) for i in range(count)] or [self.cpu()]

    def devices(self) -> List[Any]:
        return [self.cpu()] + [self.make_native_device("gpu", i) for i in range(self.num_gpus())]

    def device(self, spec: Any) -> Any:
        """The native device for any accepted spec, checked to exist."""
        if self.is_loaded() and self.is_native_device(spec):
            described = self.describe(spec)
            self._check_exists(described.kind, described.index)
            return spec
        kind, index = self._kind_index(spec)
        self._check_exists(kind, index)
        return self.make_native_device(kind, index)

    def _kind_index(self, spec: Any) -> tuple:
        if isinstance(spec, Device):
            return spec.kind, spec.index
        if type(spec) is str:  # str subclasses are some framework's native devices
            parsed = parse_spec(spec)
            if parsed.platform is not None:
                self.check_platform(parsed.platform)
            return parsed.kind, parsed.index
        from devshim.backends import describe_native_device

        described = describe_native_device(spec)
        if described is None:
            from devshim.device import ACCEPTED_SPECS

            raise InvalidDeviceError(
                f"Cannot use {spec!r} ({type(spec).__name__}) as a device. "
                f"Accepted forms: {ACCEPTED_SPECS}."
            )
        return described.kind, described.index

    def check_platform(self, platform: str) -> None:
        """Called when a spec names a platform ("cuda", "mps"); adapters may refuse it."""

    def _check_exists(self, kind: str, index: int) -> None:
        if kind == "gpu":
            self.gpu(index)
        elif index != 0 and not self.has_cpu(index):
            raise DeviceUnavailableError(
                f"cpu:{index} is not available on the {self.name} backend. Use ds.cpu(), or "
                f"ds.devices() to list the devices it has."
            )

    def has_cpu(self, index: int) -> bool:
        """Whether cpu:index exists (frameworks with several CPU devices override)."""
        return index == 0

    def __repr__(self) -> str:
        return f"<devshim {self.name} backend>"


def _check_index(i: Any) -> None:
    if not isinstance(i, int) or isinstance(i, bool) or i < 0:
        raise InvalidDeviceError(f"A GPU index must be a non-negative int, not {i!r}.")

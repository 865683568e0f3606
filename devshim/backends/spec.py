"""The declaration row each backend package makes in its `__init__.py`.

A backend is one folder, `devshim/backends/<name>/`, whose `__init__.py`
holds one `BackendSpec` called `SPEC` and imports no framework. The
registry is built from those rows alone. What the backend can do beyond the
device contract is read from which modules its folder has (`ops.py`,
`guard.py`, `model.py`, `interop.py`, `autodiff.py`, `memory.py`): a missing module means the capability is absent.
"""

from __future__ import annotations

import importlib
import os
import sys

__all__ = ["BackendSpec", "CAPABILITY_MODULES", "machine_kind"]

#: capability name -> the module of a backend package that provides it.
CAPABILITY_MODULES = {
    "devices": "core",
    "ops": "ops",
    "guard": "guard",
    "model": "model",
    "interop": "interop",
    "autodiff": "autodiff",
    "memory": "memory",
}


class BackendSpec:
    """One backend's declaration: everything devshim knows about it before importing anything.

    `name`           canonical name ("torch").
    `aliases`        other accepted names ("pytorch",).
    `import_name`    the framework's top-level module ("torch"); dispatch only asks
                       a backend about a value once this module is in `sys.modules`.
    `distributions`  pip packages that may provide the framework (for versions).
    `extra`          the devshim extra that installs it with the versions devshim is tested
                       with (`pip install "devshim[torch]"`, once devshim is installed).
    `auto_rank`      order of automatic selection (lower first); None: never auto-selected.
    `virtual_devices` whether `DEVSHIM_VIRTUAL_DEVICES` can work on it.
    `host_partner`   the backend whose arrays are this one's host arrays ("numpy" for
                       CuPy): that backend hands GPU transfers of its arrays to this one,
                       and this one's copies to the CPU are that backend's arrays.
    `title`          the framework's name for people ("PyTorch").
    `installs`       how to install the framework on each kind of machine (`machine_kind()`):
                       kind -> the hint, the commands the README recommends there; other kinds
                       get `pip install <distributions[0]>`, then the extra.
    `package`        the backend's package (filled in by the registry).

    Example:
        >>> SPEC = BackendSpec("torch", aliases=("pytorch",), import_name="torch",
        ...                    distributions=("torch",), extra="torch", auto_rank=10,
        ...                    title="PyTorch")
    """

    __slots__ = ("name", "aliases", "import_name", "distributions", "extra", "auto_rank",
                 "virtual_devices", "host_partner", "title", "installs", "package")

    def __init__(
        self,
        name: str,
        *,
        import_name: str,
        title: str,
        aliases: tuple = (),
        distributions: tuple = (),
        extra=None,
        auto_rank=None,
        virtual_devices: bool = False,
        host_partner=None,
        installs=None,
        package=None,
    ) -> None:
        self.name = name
        self.aliases = tuple(aliases)
        self.import_name = import_name
        self.distributions = tuple(distributions) or (import_name,)
        self.extra = extra
        self.auto_rank = auto_rank
        self.virtual_devices = virtual_devices
        self.host_partner = host_partner
        self.title = title
        self.installs = dict(installs or {})
        self.package = package or f"devshim.backends.{name}"

    def is_installed(self) -> bool:
        """Whether the framework can be imported, found without importing it.

        Example:
            >>> SPEC.is_installed()
            True
        """
        return self.import_name in sys.modules or _findable(self.import_name)

    def is_loaded(self) -> bool:
        """Whether the framework is imported already (so its tensors may exist).

        Example:
            >>> SPEC.is_loaded()
            False
        """
        return self.import_name in sys.modules

    def version(self):
        """The installed framework's version, read from package metadata (no import).

        Example:
            >>> SPEC.version()
            '2.13.0+cpu'
        """
        from importlib import metadata

        for dist in self.distributions:
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        return None

    def has_module(self, module: str) -> bool:
        """Whether the backend package has `module` (found without importing it).

        Example:
            >>> SPEC.has_module("ops")
            True
        """
        return _findable(f"{self.package}.{module}")

    def capabilities(self) -> dict:
        """capability -> whether the backend has it, for `devshim info`.

        Example:
            >>> SPEC.capabilities()
            {'devices': True, 'ops': True, 'guard': False, 'model': False, 'interop': True, 'autodiff': False, 'virtual devices': False}
        """
        found = {name: self.has_module(module) for name, module in CAPABILITY_MODULES.items()}
        found["virtual devices"] = self.virtual_devices
        return found

    def module(self, module: str):
        """Import one module of the backend package (`"core"`, `"ops"`, ...).

        Example:
            >>> ops = SPEC.module("ops")
        """
        return importlib.import_module(f"{self.package}.{module}")

    def install_hint(self) -> str:
        """How to install the framework, for error messages and `devshim info`: the command the
        README recommends on this kind of machine (`machine_kind()`: PyTorch's CPU build where
        there is no NVIDIA GPU, say), its own package first, which works however devshim came,
        then devshim's extra, which works where devshim is installed.

        Example:
            >>> SPEC.install_hint()  # on a Linux machine without an NVIDIA GPU
            'pip install torch --index-url https://download.pytorch.org/whl/cpu (the CPU build; ...'
        """
        special = self.installs.get(machine_kind())
        if special is not None:
            return special
        own = f"pip install {self.distributions[0]}"
        if not self.extra:
            return own
        return f'{own}, or pip install "devshim[{self.extra}]" where devshim is installed'

    def __repr__(self) -> str:
        return f"BackendSpec({self.name!r}, import_name={self.import_name!r})"


def _findable(module: str) -> bool:
    """Whether `module` can be imported, found without importing it."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def machine_kind() -> str:
    """What kind of machine this is, for install hints, found without importing anything or
    starting a driver: "nvidia" (an NVIDIA driver is loaded), "mac", or "cpu" (no NVIDIA GPU).

    Example:
        >>> machine_kind()
        'cpu'
    """
    if sys.platform == "darwin":
        return "mac"
    if os.path.exists("/proc/driver/nvidia/version") or os.path.exists(r"C:\Windows\System32\nvidia-smi.exe"):
        return "nvidia"
    return "cpu"

"""devshim's pytest plugin: your own tests on every backend, on virtual GPUs, under the guard.

Installed with devshim (the `pytest11` entry point `devshim`), so every pytest run
of a project where devshim is installed loads it; `-p no:devshim` turns it off. It
imports no framework until a test (or this run's options) asks for one:

`--devshim-backend NAME[,NAME...]|all`   the backends `ds_backend` runs tests on
                                           (ini: `devshim_backend`); default: the
                                           selected backend (`DEVSHIM_BACKEND`, or auto).
`--devshim-virtual-devices N`            N virtual GPUs on every backend, set before
                                           any framework starts (ini: `devshim_virtual_devices`).
`--devshim-virtual-memory SIZE`          the size of each virtual GPU (`16GiB`; ini:
                                           `devshim_virtual_memory`): torch's refuse an
                                           allocation past it with `torch.OutOfMemoryError`.

Fixtures: `ds_backend` (the backend's name; parametrised over the chosen backends,
with the backend selected by `ds.use_backend` while the test runs), `ds_device`
(its `try_gpu()`) and `ds_devices` (its `try_all_gpus()`).

Markers: `gpus(n)` skips, saying why, where fewer than `n` GPUs (real or virtual)
are there; `backends("torch", "jax")` limits the backends a test runs on;
`transfer_guard("disallow")` runs the test under `ds.transfer_guard`.

Under virtual devices a backend that has none (NumPy, CuPy) runs its tests on its CPU, as
on a machine with real GPUs: virtual devices are off in this process while such a test
runs, and only its tests that need GPUs (`gpus(n)`) skip, saying why.

The guide is docs/testing-your-code.md. Nothing in devshim imports this module.

Example:
    >>> # pytest --devshim-backend all --devshim-virtual-devices 2
    >>> @pytest.mark.gpus(2)
    ... @pytest.mark.transfer_guard("disallow")
    ... def test_split(ds_devices):
    ...     assert len(ds_devices) == 2
"""

from __future__ import annotations

import contextlib
import os

import pytest

from devshim import settings
from devshim.errors import BackendError, DevshimError, VirtualMemorySizeError

__all__ = ["ds_backend", "ds_device", "ds_devices", "DEVSHIM_MARKERS"]

#: marker name -> the line `pytest --markers` shows for it.
DEVSHIM_MARKERS = {
    "gpus": "gpus(n): skip the test, saying why, where fewer than n GPUs (real or virtual) "
            "are there (devshim)",
    "backends": "backends(*names): run the test on these devshim backends only (devshim)",
    "transfer_guard": "transfer_guard(level, **directions): run the test under "
                      "ds.transfer_guard(level, ...); an implicit copy fails it (devshim)",
}

_BACKEND_OPTION = "--devshim-backend"
_VIRTUAL_OPTION = "--devshim-virtual-devices"
_MEMORY_OPTION = "--devshim-virtual-memory"
#: option -> (its ini-file default and `dest`, metavar, help, the ini's help after "default for OPTION: ").
_OPTIONS = {
    _BACKEND_OPTION: (
        "devshim_backend", "NAME[,NAME...]|all",
        "backends that tests using the ds_backend fixture run on: names or aliases, comma "
        "separated, or 'all' for every installed one. Default: the selected backend "
        "(DEVSHIM_BACKEND, else the first installed).", "NAME[,NAME...] or all"),
    _VIRTUAL_OPTION: (
        "devshim_virtual_devices", "N",
        "present N virtual GPUs, backed by host memory, on every backend that can (set "
        "before any framework starts; overrides DEVSHIM_VIRTUAL_DEVICES).", "N virtual GPUs"),
    _MEMORY_OPTION: (
        "devshim_virtual_memory", "SIZE",
        "the size of each virtual GPU, e.g. 16GiB or 64MiB (overrides DEVSHIM_VIRTUAL_MEMORY): "
        "torch's virtual GPUs refuse an allocation past it with torch.OutOfMemoryError, as a GPU "
        "of that size would; ds.memory reports it on every backend.", "the size of each virtual GPU"),
}


class _Plan:
    """What this run asked for: the backends and the virtual-device count, and where from."""

    def __init__(self) -> None:
        self.backends = None  # names; None until the default is resolved (on first need)
        self.backends_source = ""
        self.explicit = False  # this run configured devshim (an option, or the ini file)
        self.default_error = None  # why the default backend could not be resolved
        self.virtual = None  # the count this run set (option or ini), else None
        self.virtual_source = ""
        self.saved_env: dict = {}  # variable this run set -> (its value before (None: unset), its setter)

    def chosen(self) -> list:
        """The backends `ds_backend` runs on; a collection failure when there is none."""
        if self.backends is None and self.default_error is None:
            from devshim.backends import get_backend, selection_reason

            try:
                self.backends = [get_backend().name]
                self.backends_source = selection_reason()
            except DevshimError as err:
                self.default_error = str(err)
        if self.default_error is not None:
            pytest.fail(f"devshim: no backend to run ds_backend tests on: {self.default_error} "
                        f"Choose one with {_BACKEND_OPTION}.", pytrace=False)
        return self.backends

    def virtual_count(self) -> int:
        """The virtual GPUs asked for: this run's, or `DEVSHIM_VIRTUAL_DEVICES`'s (0: none)."""
        if self.virtual is not None:
            return self.virtual
        try:
            return settings.virtual_device_count()
        except DevshimError:  # a bad DEVSHIM_VIRTUAL_DEVICES: the backends say so when used
            return 0

    def virtual_text(self) -> str:
        count = self.virtual_count()
        from_env = f"{settings.VIRTUAL_DEVICES_VAR}={os.environ.get(settings.VIRTUAL_DEVICES_VAR, '').strip()}"
        source = from_env if self.virtual is None else self.virtual_source
        return f"{count} virtual GPU{'s' if count != 1 else ''} ({source})" if count else "no virtual devices"


_PLAN = pytest.StashKey[_Plan]()
_GUARD = pytest.StashKey[object]()  # the transfer_guard a marked test's call runs under


# ------------------------------------------------------------------ options


def pytest_addoption(parser) -> None:
    group = parser.getgroup("devshim", "devshim: tests on every backend and on virtual GPUs")
    for flag, (ini, metavar, help_text, ini_help) in _OPTIONS.items():
        group.addoption(flag, dest=ini, default=None, metavar=metavar, help=help_text)
        parser.addini(ini, f"default for {flag}: {ini_help}", default=None)


def _option(config, flag: str) -> tuple:
    """(value, where it came from) for an option with an ini-file default; (None, "") if neither."""
    ini = _OPTIONS[flag][0]
    value = config.getoption(ini)
    if value is not None:
        return value, flag
    value = config.getini(ini)
    if value not in (None, ""):
        return str(value), f"{ini} in {config.inipath.name if config.inipath else 'the ini file'}"
    return None, ""


def _parse_backends(value: str, source: str) -> list:
    from devshim.backends import available_backends, canonical_name, specs

    installed = available_backends()
    listing = f"Installed backends: {', '.join(installed)} (or 'all')."
    names = [part.strip() for part in value.split(",") if part.strip()]
    if not names:
        raise pytest.UsageError(f"{source} names no backend. {listing}")
    if names == ["all"]:
        return list(installed)
    chosen = []
    for name in names:
        try:
            key = canonical_name(name)
        except BackendError:
            raise pytest.UsageError(f"{source}: unknown backend {name!r}. {listing}") from None
        if key not in installed:
            raise pytest.UsageError(
                f"{source}: the {key} backend is not installed here ({specs()[key].install_hint()}). "
                f"{listing}")
        chosen.append(key)
    return list(dict.fromkeys(chosen))  # each once, in the order first named


def pytest_configure(config) -> None:
    for line in DEVSHIM_MARKERS.values():
        config.addinivalue_line("markers", line)
    plan = _Plan()
    config.stash[_PLAN] = plan
    value, source = _option(config, _BACKEND_OPTION)
    if value is not None:
        plan.backends, plan.backends_source, plan.explicit = _parse_backends(value, source), source, True
    value, source = _option(config, _VIRTUAL_OPTION)
    if value is not None:
        plan.virtual = settings._whole(str(value).strip())
        if plan.virtual < 0:
            raise pytest.UsageError(f"{source} takes a whole number of virtual GPUs (0 or more), not {value!r}.")
        plan.virtual_source = f"{source} {plan.virtual}" if source == _VIRTUAL_OPTION else source
        # Before any framework starts its devices: TensorFlow and JAX fix them at start-up.
        # The variable too, so that interpreters the tests start see the same devices.
        _set_variable(plan, settings.VIRTUAL_DEVICES_VAR, plan.virtual, settings.set_virtual_devices)
    value, source = _option(config, _MEMORY_OPTION)
    if value is not None:
        try:
            size = settings.parse_size(value, source=source)
        except VirtualMemorySizeError as err:
            raise pytest.UsageError(str(err)) from None
        _set_variable(plan, settings.VIRTUAL_MEMORY_VAR, size, settings.set_virtual_memory)


def pytest_unconfigure(config) -> None:
    plan = config.stash.get(_PLAN, None)
    if plan is None:
        return
    for variable, (value, setter) in reversed(plan.saved_env.items()):  # the last set is restored first
        if value is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = value
        setter(None)  # back to the environment's


def _set_variable(plan: _Plan, variable: str, value, setter) -> None:
    """Set environment variable `variable` to `value` (interpreters the tests start see it too), and
    `setter(value)` for this process (so this run configured devshim); `pytest_unconfigure` restores both."""
    plan.explicit = True
    plan.saved_env[variable] = (os.environ.get(variable), setter)
    os.environ[variable] = str(value)
    setter(value)


# ------------------------------------------------------------------ the report header


def _describe_devices(name: str, cpu_only: bool = False) -> str:
    from devshim.backends import get_backend

    try:
        adapter = get_backend(name)
        described = [adapter.describe(native) for native in ([adapter.cpu()] if cpu_only else adapter.devices())]
    except DevshimError as err:
        return f"unavailable: {err}"
    return ", ".join(f"{d} (virtual)" if d.virtual else str(d) for d in described)


def pytest_report_header(config) -> list:
    plan = config.stash[_PLAN]
    try:
        names = plan.chosen()
    except pytest.fail.Exception as failure:
        return [f"devshim: no backend ({failure.msg})"]
    lines = [f"devshim: {'backend' if len(names) == 1 else 'backends'} {', '.join(names)} "
             f"({plan.backends_source}); {plan.virtual_text()}"]
    # Listing devices starts the framework: done when this run configured devshim, or
    # when the framework is running already; never in a project that merely has devshim.
    for name in names:
        if _without_virtual_devices(name, plan):
            lines.append(f"devshim {name} devices: {_describe_devices(name, cpu_only=True)} (no virtual GPUs: its tests run on its CPU)")
        elif plan.explicit or _running(name):
            lines.append(f"devshim {name} devices: {_describe_devices(name)}")
    return lines


def _running(name: str) -> bool:
    """Whether listing `name`'s devices starts nothing: the framework is imported already, and
    so is its accelerator partner, whose GPUs it lists (CuPy, under the numpy backend: another
    plugin importing NumPy must not make this header start CUDA)."""
    from devshim.backends import specs

    found = specs()
    if not found[name].is_loaded():
        return False
    partners = [spec for spec in found.values() if spec.host_partner == name and spec.is_installed()]
    return all(spec.is_loaded() for spec in partners)


# ------------------------------------------------------------------ parametrisation


def _marked_backends(definition) -> object:
    """The backends a `backends` marker allows (canonical names), or None without one."""
    marker = definition.get_closest_marker("backends")
    if marker is None:
        return None
    from devshim.backends import canonical_name

    if not marker.args or not all(isinstance(a, str) for a in marker.args):
        pytest.fail(f"{definition.nodeid}: @pytest.mark.backends takes backend names, e.g. "
                    f'@pytest.mark.backends("torch", "jax"); got {marker.args!r}.', pytrace=False)
    try:
        return [canonical_name(name) for name in marker.args]
    except BackendError as err:
        pytest.fail(f"{definition.nodeid}: @pytest.mark.backends: {err}", pytrace=False)


def pytest_generate_tests(metafunc) -> None:
    if "ds_backend" not in metafunc.fixturenames:
        return
    plan = metafunc.config.stash[_PLAN]
    chosen = plan.chosen()
    allowed = _marked_backends(metafunc.definition)
    params = chosen if allowed is None else [name for name in chosen if name in allowed]
    if not params:
        reason = (f"runs on {', '.join(allowed)} only (@pytest.mark.backends); this run's backends "
                  f"are {', '.join(chosen)} ({plan.backends_source})")
        params = [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="no-backend")]
    metafunc.parametrize("ds_backend", params, indirect=True)


# ------------------------------------------------------------------ fixtures


def _cannot(name: str, plan: _Plan, err) -> None:
    pytest.fail(f"devshim: the {name} backend cannot give this run its devices "
                f"({plan.virtual_text()}): {err}", pytrace=False)


def _gpu_count(name: str, plan: _Plan) -> int:
    """The GPUs `name` sees here; a failure, not a wrong answer, where it cannot say."""
    from devshim.api import num_gpus

    try:
        return num_gpus(backend=name)
    except DevshimError as err:
        _cannot(name, plan, err)


@pytest.fixture(scope="session")
def ds_backend(request) -> str:
    """The name of the backend this test runs on; the test is run once per chosen backend.

    The backends are `--devshim-backend`'s (default: the selected one), less those a
    `@pytest.mark.backends` marker leaves out; the test ids show the name
    (`test_step[torch]`). While the test runs the backend is selected
    (`ds.use_backend`); in a fixture of wider scope select it yourself with
    `with ds.use_backend(ds_backend):` or pass `backend=ds_backend`. Under virtual
    devices a backend that has none (NumPy) runs the test on its CPU, with virtual devices
    off in this process while the test runs, as on a machine with real GPUs; one that
    cannot present them any more (its framework started first) fails, saying so.

    Example:
        >>> def test_ones(ds_backend):
        ...     assert ds.get_backend().name == ds_backend
    """
    name = request.param
    plan = request.config.stash[_PLAN]
    count = plan.virtual_count()
    # (a backend without virtual devices runs on its CPU: _devshim_test turns them off around the test)
    if count and not _without_virtual_devices(name, plan):
        got = _gpu_count(name, plan)
        if got != count:  # never run on other devices than the ones asked for
            _cannot(name, plan, f"it has {got} GPUs, not {count}")
    return name


@pytest.fixture
def ds_device(ds_backend):
    """`ds.try_gpu()` of the test's backend: its first GPU (real or virtual), else the CPU.

    Example:
        >>> def test_on_device(ds_device):
        ...     x = torch.ones(3, device=ds_device)
    """
    from devshim.api import try_gpu

    return try_gpu(backend=ds_backend)


@pytest.fixture
def ds_devices(ds_backend) -> list:
    """`ds.try_all_gpus()` of the test's backend: every GPU, or `[cpu]` (never empty).

    Example:
        >>> @pytest.mark.gpus(2)
        ... def test_split(ds_devices):
        ...     a, b = ds_devices[:2]
    """
    from devshim.api import try_all_gpus

    return try_all_gpus(backend=ds_backend)


@pytest.fixture(autouse=True)
def _devshim_test(request):
    """Selects `ds_backend`'s backend around the test, and applies devshim's markers."""
    item = request.node
    uses_backend = "ds_backend" in request.fixturenames
    gpus = item.get_closest_marker("gpus")
    backends = item.get_closest_marker("backends")
    guard = item.get_closest_marker("transfer_guard")
    if not (uses_backend or gpus or backends or guard):
        yield
        return
    plan = request.config.stash[_PLAN]
    # A test without ds_backend runs once, on the selected backend (DEVSHIM_BACKEND, auto,
    # or ds.set_backend), whatever --devshim-backend says.
    from devshim.backends import get_backend, use_backend

    name = request.getfixturevalue("ds_backend") if uses_backend else get_backend().name
    if backends is not None and not uses_backend:
        allowed = _marked_backends(item)
        if name not in allowed:
            pytest.skip(f"runs on {', '.join(allowed)} only (@pytest.mark.backends); the "
                        f"selected backend is {name}")
    on_its_cpu = _without_virtual_devices(name, plan)
    if gpus is not None:
        _check_gpus(gpus, name, plan, on_its_cpu)
    if guard is not None:
        from devshim.guard_block import transfer_guard

        # Made here, so that a bad level errors at set-up; entered around the call only.
        item.stash[_GUARD] = transfer_guard(*guard.args, **guard.kwargs)
    with contextlib.ExitStack() as stack:
        if on_its_cpu:
            stack.enter_context(_on_its_cpu(plan))
        if uses_backend:
            stack.enter_context(use_backend(name))
        yield


def _without_virtual_devices(name: str, plan: _Plan) -> bool:
    """Whether this run asks for virtual devices and backend `name` has none (NumPy, CuPy)."""
    from devshim.backends import specs

    return bool(plan.virtual_count()) and not specs()[name].virtual_devices


@contextlib.contextmanager
def _on_its_cpu(plan: _Plan):
    """No virtual devices in this process while a test of a backend that has none runs, so it
    sees its own devices (the CPU), as on a machine with real GPUs. The test's fixtures are set
    up inside (`ds_device` is the CPU); the run's count comes back after it."""
    before = plan.virtual_count()
    settings.set_virtual_devices(0)
    try:
        yield
    finally:
        settings.set_virtual_devices(plan.virtual)  # None: DEVSHIM_VIRTUAL_DEVICES's count again
        if settings.virtual_device_count() != before:  # a count set in code (ds.testing.virtual_devices)
            settings.set_virtual_devices(before)


def _check_gpus(marker, name: str, plan: _Plan, on_its_cpu: bool = False) -> None:
    if len(marker.args) != 1 or not isinstance(marker.args[0], int) or isinstance(marker.args[0], bool) \
            or marker.args[0] < 1:
        pytest.fail(f"@pytest.mark.gpus takes one whole number of GPUs (1 or more), e.g. "
                    f"@pytest.mark.gpus(2); got {marker.args!r}.", pytrace=False)
    needed = marker.args[0]
    if on_its_cpu:
        pytest.skip(f"needs {needed} GPU{'s' if needed > 1 else ''}: {name} has no virtual devices; its tests "
                    f"run on its CPU in this run ({plan.virtual_text()})")
    have = _gpu_count(name, plan)
    if have >= needed:
        return
    from devshim.backends import specs

    if plan.virtual_count():
        hint = f"{name} has {have} here ({plan.virtual_text()}); run with {_VIRTUAL_OPTION} {needed}"
    elif specs()[name].virtual_devices:
        hint = f"{name} has {have} here; run with {_VIRTUAL_OPTION} {needed} for virtual ones"
    else:
        hint = f"{name} has {have} here, and no virtual devices"
    pytest.skip(f"needs {needed} GPU{'s' if needed > 1 else ''}: {hint}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with item.stash.get(_GUARD, None) or contextlib.nullcontext():
        yield

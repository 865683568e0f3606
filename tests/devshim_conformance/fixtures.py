"""The suite's fixtures: ``harness`` runs a test once per backend that has a harness, with that
backend selected; ``two_devices`` gives two of its devices; ``setenv`` sets a variable devshim
reads. tests/devshim_conformance/conftest.py installs them for the suite (in devshim's tests and in
an installed devshim alike); tests/conftest.py for devshim's other tests. (Each is named by its
decorator: a conftest imports it under its function's name, which leaves the fixture's free.)"""

from __future__ import annotations

import os

import pytest

import devshim as ds
from devshim import settings
from devshim_conformance.harness import backends_with_harness, installed_backends, load_harness

VIRTUAL = bool(os.environ.get(settings.VIRTUAL_DEVICES_VAR, "").strip())


def backend_params() -> list:
    """One pytest param per backend with a harness, skipped with a reason where it cannot run."""
    installed = set(installed_backends())
    params = []
    for name in backends_with_harness():
        marks = []
        if name not in installed:
            marks.append(pytest.mark.skip(reason=f"{name} is not installed in this environment"))
        elif VIRTUAL and not ds.backends.specs()[name].virtual_devices:
            marks.append(pytest.mark.skip(
                reason=f"{settings.VIRTUAL_DEVICES_VAR} is set and {name} has no virtual devices "
                f"(tests/test_virtual_devices.py checks that it refuses)"))
        params.append(pytest.param(name, marks=marks, id=name))
    return params


@pytest.fixture(name="harness", params=backend_params())
def harness_fixture(request):
    """The framework's test harness, with devshim's backend selected to match it."""
    if VIRTUAL:
        # Virtual devices must exist before the harness makes its first tensor.
        ds.num_gpus(backend=request.param)
    h = load_harness(request.param)
    if h.conformance_skip:
        pytest.skip(f"{h.name}: {h.conformance_skip}")
    with ds.use_backend(h.name):
        yield h


@pytest.fixture(name="two_devices")
def two_devices_fixture(harness):
    """Two distinct native devices of the harness's backend, or a skip saying why not."""
    found = ds.devices()
    gpus = found[1:]
    if len(gpus) >= 2:
        return gpus[0], gpus[1]
    if len(found) >= 2:
        return found[0], found[1]
    pytest.skip(
        f"{harness.name} sees a single device here; run with a second GPU or "
        f"{settings.VIRTUAL_DEVICES_VAR}=2 on a backend that supports it"
    )


@pytest.fixture(name="_fresh_settings", autouse=True)
def fresh_settings_fixture():
    """Each test starts, and leaves, with settings read from the environment as it is.

    Autouse fixtures are set up before ``monkeypatch``, so this runs after
    monkeypatch has restored the environment.
    """
    yield
    settings.set_virtual_devices(None)
    settings.reload()


@pytest.fixture(name="setenv")
def setenv_fixture(monkeypatch):
    """``setenv(name, value)``: set (or with None, unset) a variable and make devshim read it."""

    def set_variable(name: str, value):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
        settings.reload()

    return set_variable

"""Shared fixtures. ``harness`` runs a test once per installed framework."""

from __future__ import annotations

import os

import pytest

import devshim as ds
from devshim import config
from harnesses import HARNESS_MODULES, installed_backends, load_harness

VIRTUAL = bool(os.environ.get(config.VIRTUAL_DEVICES_VAR, "").strip())


def _backend_params():
    installed = set(installed_backends())
    params = []
    for name in HARNESS_MODULES:
        marks = []
        if name not in installed:
            marks.append(pytest.mark.skip(reason=f"{name} is not installed in this environment"))
        elif VIRTUAL and not _supports_virtual(name):
            marks.append(pytest.mark.skip(
                reason=f"{config.VIRTUAL_DEVICES_VAR} is set and {name} has no virtual devices "
                f"(tests/test_virtual_devices.py checks that it refuses)"))
        params.append(pytest.param(name, marks=marks, id=name))
    return params


def _supports_virtual(name: str) -> bool:
    from devshim.backends import _adapter_class

    return _adapter_class(name).supports_virtual_devices


@pytest.fixture(params=_backend_params())
def harness(request):
    """The framework's test harness, with devshim's backend selected to match it."""
    if VIRTUAL:
        # Virtual devices must exist before the harness makes its first tensor.
        ds.num_gpus(backend=request.param)
    h = load_harness(request.param)
    with ds.use_backend(h.name):
        yield h


@pytest.fixture
def two_devices(harness):
    """Two distinct native devices of the harness's backend, or a skip saying why not."""
    found = ds.devices()
    gpus = found[1:]
    if len(gpus) >= 2:
        return gpus[0], gpus[1]
    if len(found) >= 2:
        return found[0], found[1]
    pytest.skip(
        f"{harness.name} sees a single device here; run with a second GPU or "
        f"{config.VIRTUAL_DEVICES_VAR}=2 on a backend that supports it"
    )

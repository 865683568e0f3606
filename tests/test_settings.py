"""devshim.settings: variables read once at first use, on reload, and scoped choices per thread."""

from __future__ import annotations

import threading

import pytest

import devshim as ds
from devshim import settings
from helpers import run_python


def test_variables_are_read_once_not_on_every_call(monkeypatch, setenv):
    setenv("DEVSHIM_DEVICE", "cpu")
    assert settings.accelerators_hidden()
    monkeypatch.delenv("DEVSHIM_DEVICE")  # changed behind devshim's back...
    assert settings.accelerators_hidden()  # ...so still what was read
    settings.reload()
    assert not settings.accelerators_hidden()


def test_reload_tells_whoever_caches_settings(setenv):
    calls = []
    settings.on_change(lambda: calls.append("changed"))
    settings.reload()
    ds.testing.virtual_devices(3)
    ds.testing.virtual_devices(3)  # no change, no call
    assert calls == ["changed", "changed"]


def test_a_bad_value_fails_only_what_needs_it(setenv):
    virtual = settings.virtual_device_count()
    setenv("DEVSHIM_DEVICE", "tpu")
    assert settings.virtual_device_count() == virtual  # unaffected
    for _ in range(2):  # and the error is raised afresh each time, not once
        with pytest.raises(ds.InvalidDeviceError, match="DEVSHIM_DEVICE='tpu' is not understood"):
            settings.accelerators_hidden()


@pytest.mark.parametrize("value, hidden", [("", False), ("auto", False), ("GPU", False), (" cpu ", True)])
def test_devshim_device_values(setenv, value, hidden):
    setenv("DEVSHIM_DEVICE", value)
    assert settings.accelerators_hidden() is hidden


def test_testing_virtual_devices_wins_over_the_variable(setenv):
    setenv("DEVSHIM_VIRTUAL_DEVICES", "2")
    assert settings.virtual_device_count() == 2
    ds.testing.virtual_devices(0)
    assert settings.virtual_device_count() == 0
    settings.set_virtual_devices(None)  # back to the variable
    assert settings.virtual_device_count() == 2


def test_scoped_backends_do_not_leak_between_threads():
    seen = []
    with ds.use_backend("numpy"):
        thread = threading.Thread(target=lambda: seen.append(settings.scoped_backend.get()))
        thread.start()
        thread.join()
        assert settings.scoped_backend.get().name == "numpy"
    assert seen == [None] and settings.scoped_backend.get() is None


def test_a_variable_set_before_first_use_is_seen_without_a_reload():
    result = run_python(
        "import os, devshim as ds\n"
        "os.environ['DEVSHIM_DEVICE'] = 'cpu'\n"
        "print(ds.num_gpus(backend='numpy'), ds.settings.accelerators_hidden())",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "True"]

"""The suite's fixtures, wherever it runs: in devshim's tests, or installed (`pytest --pyargs
devshim_conformance`)."""

from devshim_conformance.fixtures import (  # noqa: F401  (the fixtures harness, two_devices, setenv, _fresh_settings)
    fresh_settings_fixture, harness_fixture, setenv_fixture, two_devices_fixture,
)

"""Shared fixtures. ``harness`` runs a test once per backend that has a harness (the conformance
suite's fixtures, tests/devshim_conformance/fixtures.py)."""

from __future__ import annotations

import faulthandler
import os
import sys
import zlib

import pytest

from devshim import settings
from devshim_conformance.fixtures import (  # noqa: F401  (the fixtures harness, two_devices, setenv, _fresh_settings)
    fresh_settings_fixture, harness_fixture, setenv_fixture, two_devices_fixture,
)

VIRTUAL = bool(os.environ.get(settings.VIRTUAL_DEVICES_VAR, "").strip())

# The suite runs as one plain process, even when started inside a launcher's job (a Slurm
# batch script sets SLURM_LOCALID): its tests, and the interpreters they start, set the
# launcher variables they need themselves (tests/test_launcher.py, tests/test_distributed.py).
for _variable in settings.LAUNCHER_VARIABLES:
    os.environ.pop(_variable, None)


#: A test still running after this many seconds is taken as hung (the slowest takes about 10 s):
#: faulthandler prints every thread's stack and ends the run with exit status 1, rather than
#: letting it hold CI until CI's own limit. Its watchdog is a C thread that needs no GIL, so it
#: also ends a test stuck in C with the GIL held (a deadlocked torch.distributed teardown did
#: that); pytest-timeout's watchdogs, a signal handler or a Python thread, wait for the GIL there.
#: The variable is the suite's own, for tests/test_suite_watchdog.py; devshim does not read it.
HUNG_TEST_SECONDS = int(os.environ.get("DEVSHIM_TEST_HUNG_SECONDS", "300"))
_STDERR = pytest.StashKey()


def pytest_configure(config):
    # stderr as it is before any test runs: while a test runs, pytest's capture holds fd 2.
    config.stash[_STDERR] = os.fdopen(os.dup(sys.__stderr__.fileno()), "w")
    config.addinivalue_line("markers", f"{TORCH_VIRTUAL_MARK}: the test registers torch's virtual GPUs in "
                            "its process (tests/conftest.py runs it after the others where torch has a real GPU)")
    config.addinivalue_line("markers", f"{SAME_IN_EVERY_PASS}: the test does the same whatever backend is "
                            f"selected (it runs fresh interpreters naming their own); with {PASSES_VAR} set, "
                            "it runs in one of those passes alone")


#: Marks a test that registers torch's virtual GPUs in its own process; tests using a fixture
#: named `vgpu`, and those of tests/test_torch_virtual*.py, are taken as marked.
TORCH_VIRTUAL_MARK = "registers_torch_virtual_gpus"


#: Marks a test whose work does not depend on the selected backend (fresh interpreters that name
#: their own, `--backend all`).
SAME_IN_EVERY_PASS = "same_in_every_pass"

#: The backends whose passes together make one run of the suite: tools/gpu_check.py runs the suite
#: once per installed backend in one Python that holds them all, and names them here (the suite's
#: own variable, which devshim does not read). A test would otherwise do the same work in each
#: pass: one marked `same_in_every_pass` runs in one of them (chosen from its node id, which
#: spreads such tests over the passes), and a test of one backend's `harness` (which selects that
#: backend, whatever the pass's) in that backend's pass.
PASSES_VAR = "DEVSHIM_TEST_PASSES"


def owning_pass(item, passes: list) -> str | None:
    """The pass of `passes` that runs `item`, or None where every pass runs it.

    Example:
        >>> owning_pass(item_of_harness_jax, ["torch", "jax"])
        'jax'
    """
    callspec = getattr(item, "callspec", None)
    harness = callspec.params.get("harness") if callspec is not None else None
    if harness in passes:
        return harness
    if item.get_closest_marker(SAME_IN_EVERY_PASS) is not None:
        return passes[zlib.crc32(item.nodeid.encode()) % len(passes)]
    return None


def _run_once(items) -> None:
    passes = [name.strip() for name in os.environ.get(PASSES_VAR, "").split(",") if name.strip()]
    here = os.environ.get("DEVSHIM_BACKEND", "").strip()
    if here not in passes or VIRTUAL:
        return
    for item in items:
        owner = owning_pass(item, passes)
        if owner is not None and owner != here:
            item.add_marker(pytest.mark.skip(reason=f"the same in every pass of this run: it runs in the {owner} "
                                             f"pass ({PASSES_VAR})"))


def pytest_collection_modifyitems(config, items):
    """Where torch has a real GPU, the tests that register torch's virtual GPUs in their process
    run after all the others. torch cannot unregister them, and from then on a backward pass on
    the real GPU fails in that process (torch 2.11 on an H200: an internal assert in its
    autograd engine; docs/virtual-devices.md): a test of real-GPU autograd must not come after
    one of them in the same process, nor in the same pytest-xdist worker, which takes its tests
    in the order collected."""
    _run_once(items)
    if VIRTUAL:  # this pass registered them at start-up, in every process
        return
    registering = [item for item in items if _registers_torch_virtual_gpus(item)]
    if not registering:
        return
    from machine import real_gpus

    if real_gpus("torch"):
        chosen = set(map(id, registering))
        items[:] = [item for item in items if id(item) not in chosen] + registering


def _registers_torch_virtual_gpus(item) -> bool:
    return (item.get_closest_marker(TORCH_VIRTUAL_MARK) is not None
            or "vgpu" in getattr(item, "fixturenames", ())
            or os.path.basename(str(item.fspath)).startswith("test_torch_virtual"))


def pytest_unconfigure(config):
    config.stash[_STDERR].close()


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Skips are counted, not listed (pyproject.toml's `-rfE`: a backend's run skips hundreds of
    other backends' and GPU tests, whose lines pushed the result off the screen): one line says
    how to list them."""
    skipped = len(terminalreporter.stats.get("skipped", []))
    shown = getattr(config.option, "reportchars", "") or ""
    if skipped and not set(shown) & set("sSaA"):
        terminalreporter.write_line(f"{skipped} skipped: pytest -rs lists each with its reason (another backend's "
                                    f"tests, a GPU or a framework release this machine lacks)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    faulthandler.dump_traceback_later(HUNG_TEST_SECONDS, exit=True, file=item.config.stash[_STDERR])
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def vgpu(setenv):
    """Two virtual torch GPUs for this test, torch selected; gives torch (skips before torch 2.10)."""
    import gc

    import devshim as ds
    from devshim.backends.probes import release

    torch = pytest.importorskip("torch")
    if release("torch") < (2, 10):
        pytest.skip("torch's virtual GPUs need torch 2.10 or later")
    setenv("DEVSHIM_DEVICE", None)
    ds.testing.virtual_devices(2)
    gc.collect()  # an earlier test's tensors held in a cycle (an error's traceback) go now, not midway
    with ds.use_backend("torch"):
        assert ds.num_gpus() == 2
        yield torch

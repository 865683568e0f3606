"""devshim's pytest plugin (devshim/pytest_plugin.py), run the way users run it: pytester
writes a small project of tests and runs pytest on it, with the plugin loaded from devshim's
``pytest11`` entry point.

Runs that need a fresh process (virtual devices must be set before a framework starts) go
through ``runpytest_subprocess``; the rest run inline, in this process, whose backend is the
tox env's (``DEVSHIM_BACKEND``) and whose virtual devices are the pass's
(``DEVSHIM_VIRTUAL_DEVICES``)."""

from __future__ import annotations

import json
import os

import pytest

import devshim as ds
from devshim import settings
from devshim.backends import backend_names, specs
from devshim_conformance import backends_with_harness, load_harness
from machine import real_gpus

pytest_plugins = ["pytester"]

#: A conftest for the projects below: ``scalar(backend, device)`` is a 0-d tensor of the
#: backend's framework, made on ``device`` by the backend's harness (the framework's own way).
SCALAR_CONFTEST = '''
import pytest

from devshim_conformance import load_harness


def make_scalar(backend, device, value=2.0):
    return load_harness(backend).tensor(value, device=device)


@pytest.fixture
def scalar():
    return make_scalar
'''
TESTS = os.path.dirname(os.path.abspath(__file__))


def selected() -> str:
    return ds.get_backend().name


def virtual_pass() -> int:
    """The virtual GPUs of this pass of the suite (DEVSHIM_VIRTUAL_DEVICES), 0 when none."""
    return settings.virtual_device_count()


def other_backend(name: str) -> str:
    return next(other for other in backend_names() if other != name)


@pytest.fixture(autouse=True)
def framework_started():
    """The selected framework, and devshim's modules for it, imported before any inline run.

    pytester's inline runs put ``sys.modules`` back as it was when they end: a framework first
    imported inside one would be imported a second time by the next, which PyTorch does not
    survive. Importing it here, outside the runs, keeps it.
    """
    name = selected()
    if not (virtual_pass() and not specs()[name].virtual_devices):
        ds.devices(backend=name)
    with ds.transfer_guard("log"):  # loads the backends' guard modules
        pass


@pytest.fixture
def fresh(pytester, monkeypatch):
    """``pytester.runpytest_subprocess``, in an interpreter that imports this devshim."""
    home = os.path.dirname(os.path.dirname(os.path.abspath(ds.__file__)))
    # (and the harnesses, for SCALAR_CONFTEST)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [home, TESTS, os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")

    def run(*args):
        return pytester.runpytest_subprocess(*args, timeout=300)

    return run


# ------------------------------------------------------------------ loading


def test_the_plugin_registers_its_markers_and_options_and_turns_off_with_p_no_devshim(pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.gpus(n): skip the test*",
                                 "@pytest.mark.backends(*names): *",
                                 "@pytest.mark.transfer_guard(level, **directions): *"])
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--devshim-backend=NAME*", "*--devshim-virtual-devices=N*",
                                 "*devshim_backend (*", "*devshim_virtual_devices (*"])

    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpus(1)
        @pytest.mark.backends("numpy")
        @pytest.mark.transfer_guard("log")
        def test_marked():
            pass

        def test_backend(ds_backend):
            pass
    """)
    off = pytester.runpytest("-p", "no:devshim")
    assert off.ret != 0
    off.stdout.fnmatch_lines(["*fixture 'ds_backend' not found*"])
    assert "devshim:" not in off.stdout.str()
    on = pytester.runpytest("--strict-markers", "-W", "error::pytest.PytestUnknownMarkWarning",
                            "--collect-only", "-q")
    assert on.ret == 0, on.stdout.str()
    on.stdout.fnmatch_lines(["*::test_marked", f"*::test_backend[[]{selected()}[]]"])


def test_a_project_that_does_not_use_devshim_starts_no_framework(pytester, fresh):
    """The plugin loads in every pytest run where devshim is installed: it must cost no
    framework import there (the header names the backend without starting it)."""
    # Compared with the same run without devshim's plugin: other plugins (a lab image has many:
    # pytest-benchmark, jaxtyping, ...) may import a framework themselves; devshim adds none.
    frameworks = sorted({spec.import_name for spec in specs().values()})
    pytester.makepyfile(f"""
        import json, os, sys

        def test_record_the_frameworks_imported():
            imported = [name for name in {frameworks!r} if name in sys.modules]
            with open(os.environ["IMPORTED_LIST"], "w") as f:
                json.dump(imported, f)
    """)
    imported = {}
    for plugin in ("with", "without"):
        listing = pytester.path / f"imported-{plugin}.json"
        os.environ["IMPORTED_LIST"] = str(listing)  # (the subprocess inherits it; removed below)
        try:
            result = fresh(*(["-p", "no:devshim"] if plugin == "without" else []))
        finally:
            del os.environ["IMPORTED_LIST"]
        result.assert_outcomes(passed=1)
        imported[plugin] = json.loads(listing.read_text())
        if plugin == "with":
            result.stdout.fnmatch_lines([f"devshim: backend {selected()} (*); *"])
            header = result.stdout.str()
    assert imported["with"] == imported["without"], imported
    # Devices are listed only for a framework running already (another plugin imported it)
    if specs()[selected()].import_name not in imported["without"]:
        assert f"devshim {selected()} devices:" not in header


def test_the_header_lists_numpy_devices_only_where_the_gpu_partner_runs_already(pytester, fresh, monkeypatch):
    """Under the numpy backend the GPUs are CuPy's: another plugin importing NumPy (a lab image
    has several) must not make the header import CuPy to list them. A stand-in CuPy, found
    installed, records its import."""
    fake = pytester.mkdir("site")
    (fake / "cupy").mkdir()
    marker = pytester.path / "cupy-imported"
    (fake / "cupy" / "__init__.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nraise ImportError('a stand-in CuPy: importing it is the failure')\n")
    pytester.makeconftest("import numpy  # as another pytest plugin might\n")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    monkeypatch.setenv("DEVSHIM_BACKEND", "numpy")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(fake), os.environ["PYTHONPATH"]]))
    monkeypatch.delenv(settings.VIRTUAL_DEVICES_VAR, raising=False)
    result = fresh()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["devshim: backend numpy (DEVSHIM_BACKEND=numpy); no virtual devices"])
    assert "devshim numpy devices:" not in result.stdout.str()
    assert not marker.exists()


# ------------------------------------------------------------------ options


def test_without_the_option_ds_backend_is_the_selected_backend_and_ids_show_it(pytester):
    name = selected()
    pytester.makepyfile("""
        import pytest
        import devshim as ds
        from devshim import settings

        @pytest.fixture(scope="module")
        def per_module(ds_backend):          # a wider-scoped fixture may depend on it
            return ds_backend

        def test_selected(ds_backend, per_module):
            assert ds.get_backend().name == ds_backend == per_module

        def test_after():                    # the selection ends with the test
            assert settings.scoped_backend.get() is None
    """)
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"devshim: backend {name} (*", f"*::test_selected[[]{name}[]] PASSED*"])


def collected_ids(result) -> list:
    """The backends in the ids of the ``test_ids`` tests a ``--collect-only`` run lists."""
    return [line.split("[", 1)[1].split("]")[0] for line in result.stdout.lines if "test_ids[" in line]


def test_the_backend_option_takes_names_aliases_and_all_and_the_ini_file_too(pytester):
    pytester.makepyfile("""
        import devshim as ds

        def test_ids(ds_backend):
            assert ds.get_backend().name == ds_backend
    """)
    installed = ds.available_backends()
    result = pytester.runpytest("--devshim-backend", "all", "--collect-only")
    assert collected_ids(result) == installed
    result.stdout.fnmatch_lines([f"devshim: backend* {', '.join(installed)} (--devshim-backend); *"])

    name = selected()
    alias = (specs()[name].aliases or (name,))[0]
    result = pytester.runpytest("--devshim-backend", f"numpy, {alias},{name}", "--collect-only", "-q")
    assert collected_ids(result) == list(dict.fromkeys(["numpy", name]))  # canonical, once each

    pytester.makeini(f"[pytest]\ndevshim_backend = {name},numpy\n")
    result = pytester.runpytest("--collect-only")
    assert collected_ids(result) == list(dict.fromkeys([name, "numpy"]))
    result.stdout.fnmatch_lines(["devshim: backend* (devshim_backend in tox.ini); *"])
    result = pytester.runpytest("--devshim-backend", "numpy", "--collect-only", "-q")
    assert collected_ids(result) == ["numpy"]  # the command line wins over the ini file


def test_an_unknown_or_uninstalled_backend_is_a_usage_error_listing_the_installed_ones(pytester):
    pytester.makepyfile("def test_ids(ds_backend): pass")
    listing = f"Installed backends: {', '.join(ds.available_backends())} (or 'all')."
    result = pytester.runpytest("--devshim-backend", "nonesuch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --devshim-backend: unknown backend 'nonesuch'. {listing}"])
    result = pytester.runpytest("--devshim-backend", " , ")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --devshim-backend names no backend. {listing}"])
    missing = [name for name in backend_names() if name not in ds.available_backends()]
    if missing:
        pytester.makeini(f"[pytest]\ndevshim_backend = {missing[0]}\n")
        result = pytester.runpytest()
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"ERROR: devshim_backend in tox.ini: the {missing[0]} backend is not "
                                     f"installed here (pip install*). {listing}"])


@pytest.mark.parametrize("value", ["-1", "two", ""])
def test_a_virtual_device_count_that_is_not_a_whole_number_is_a_usage_error(pytester, value):
    before = settings.virtual_device_count(), os.environ.get(settings.VIRTUAL_DEVICES_VAR)
    result = pytester.runpytest(f"--devshim-virtual-devices={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --devshim-virtual-devices takes a whole number of virtual GPUs "
                                 f"(0 or more), not {value!r}."])
    assert (settings.virtual_device_count(), os.environ.get(settings.VIRTUAL_DEVICES_VAR)) == before


# ------------------------------------------------------------------ markers


def test_the_backends_marker_limits_the_backends_and_skips_saying_why(pytester):
    name, other = selected(), other_backend(selected())
    pytester.makepyfile(f"""
        import pytest
        import devshim as ds

        @pytest.mark.backends({name!r})
        def test_here(ds_backend):
            assert ds_backend == {name!r}

        @pytest.mark.backends({other!r})
        def test_elsewhere(ds_backend):
            raise AssertionError("ran on a backend the marker leaves out")

        @pytest.mark.backends({name!r}, {other!r})
        def test_without_the_fixture_runs_on_the_selected_backend():
            assert ds.get_backend().name == {name!r}

        @pytest.mark.backends({other!r})
        def test_without_the_fixture_elsewhere():
            raise AssertionError("ran on a backend the marker leaves out")
    """)
    result = pytester.runpytest("-rs", "-v")
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines_random([
        f"SKIPPED [[]1[]] *: runs on {other} only (@pytest.mark.backends); this run's backends are {name} (*)",
        f"SKIPPED [[]1[]] *: runs on {other} only (@pytest.mark.backends); the selected backend is {name}",
        "*::test_elsewhere[[]no-backend[]] SKIPPED*",
    ])

    pytester.makepyfile(test_bad="""
        import pytest

        @pytest.mark.backends("nonesuch")
        def test_bad(ds_backend):
            pass
    """)
    result = pytester.runpytest("test_bad.py")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*test_bad: @pytest.mark.backends: Unknown backend 'nonesuch'. Valid names:*"])


def test_the_gpus_marker_skips_with_the_reason_where_too_few_gpus_are_there(pytester):
    name = selected()
    if virtual_pass() and not specs()[name].virtual_devices:
        pytest.skip(f"{name} has no virtual devices, and this pass asks for them")
    have = ds.num_gpus(backend=name)
    pytester.makepyfile(f"""
        import pytest
        import devshim as ds

        @pytest.mark.gpus({have + 1})
        def test_too_many(ds_backend):
            raise AssertionError("ran without the GPUs it needs")

        @pytest.mark.gpus({have + 1})
        def test_too_many_without_the_fixture():
            raise AssertionError("ran without the GPUs it needs")

        @pytest.mark.gpus({max(have, 1)})
        def test_enough(ds_devices):
            assert len(ds_devices) >= {max(have, 1)}

        @pytest.mark.gpus("two")
        def test_bad_count():
            pass
    """)
    result = pytester.runpytest("-rsE")
    needs = f"needs {have + 1} GPU{'s' if have else ''}: {name} has {have} here"
    if virtual_pass():
        hint = f"{needs} ({have} virtual GPUs ({settings.VIRTUAL_DEVICES_VAR}={virtual_pass()})); " \
               f"run with --devshim-virtual-devices {have + 1}"
    elif specs()[name].virtual_devices:
        hint = f"{needs}; run with --devshim-virtual-devices {have + 1} for virtual ones"
    else:
        hint = f"{needs}, and no virtual devices"
    skipped = [line for line in result.stdout.lines if line.startswith("SKIPPED [1]")]
    assert len(skipped) == (2 if have else 3) and all(line.endswith(f": {hint}") for line in skipped), skipped
    result.stdout.fnmatch_lines(["@pytest.mark.gpus takes one whole number of GPUs (1 or more), e.g. "
                                 "@pytest.mark.gpus(2); got ('two',)."])
    result.assert_outcomes(passed=1 if have else 0, skipped=2 if have else 3, errors=1)


def test_the_transfer_guard_marker_guards_the_test_and_only_the_test(pytester):
    pytester.makeconftest("""
        import pytest
        from devshim import guard

        @pytest.fixture
        def level_at_setup():
            return guard.current().device_to_host
    """)
    default = ds.settings.default_guard_level()
    pytester.makepyfile(f"""
        import pytest
        from devshim import guard

        @pytest.mark.transfer_guard("disallow")
        def test_guarded(level_at_setup):
            state = guard.current()
            assert (state.device_to_host, state.device_to_device, state.host_to_device) == ("disallow",) * 3
            assert level_at_setup == {default!r}

        @pytest.mark.transfer_guard("log", device_to_host="allow")
        def test_directions(ds_backend):
            state = guard.current()
            assert (state.device_to_host, state.device_to_device) == ("allow", "log")

        def test_unguarded():
            assert guard.current().device_to_host == {default!r}

        @pytest.mark.transfer_guard("sometimes")
        def test_bad_level():
            pass
    """)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*InvalidGuardLevelError: Unknown transfer-guard level 'sometimes'*"])
    assert ds.transfer_guard and ds.guard.state.scoped.get() is None


# ------------------------------------------------------------------ virtual devices, the guard failing


@pytest.mark.same_in_every_pass  # a fresh pytest run with --devshim-backend all
def test_virtual_devices_on_every_backend_and_an_implicit_copy_fails_the_guarded_test(pytester, fresh):
    """One fresh process, every installed backend, two virtual GPUs: the option wins over
    the pass's DEVSHIM_VIRTUAL_DEVICES, and is set before any framework starts."""
    pytester.makeconftest(SCALAR_CONFTEST)
    # A backend without virtual devices keeps the machine's own GPUs (asked of each framework itself).
    real = {name: real_gpus(name) for name in ds.available_backends() if not specs()[name].virtual_devices}
    pytester.makepyfile(f"""
        import os
        import pytest
        import devshim as ds

        REAL_GPUS = {real!r}

        @pytest.mark.gpus(2)
        def test_devices(ds_backend, ds_device, ds_devices, scalar):
            assert ds.num_gpus() == 2 and len(ds_devices) == 2 and ds_device == ds_devices[0]
            described = [ds.neutral_device(scalar(ds_backend, device)) for device in ds_devices]
            assert [str(d) for d in described] == ["gpu:0", "gpu:1"] and all(d.virtual for d in described)
            assert os.environ["DEVSHIM_VIRTUAL_DEVICES"] == "2"   # for interpreters the test starts

        @pytest.mark.gpus(2)
        def test_two(ds_devices):
            assert ds_devices[0] != ds_devices[1]

        @pytest.mark.gpus(3)
        def test_three(ds_devices):
            raise AssertionError("ran on two GPUs")

        @pytest.mark.transfer_guard("disallow")
        def test_implicit_read(ds_backend, ds_device, scalar):
            float(scalar(ds_backend, ds_device))

        @pytest.mark.transfer_guard("disallow")
        def test_explicit_read(ds_backend, ds_device, scalar):
            assert float(ds.to_numpy(scalar(ds_backend, ds_device))) == 2.0

        def test_unguarded_read(ds_backend, ds_device, scalar):
            assert float(scalar(ds_backend, ds_device)) == 2.0

        def test_where_it_runs(ds_backend, ds_device, scalar):
            if ds_backend in REAL_GPUS:   # no virtual devices: its CPU, as on a machine with real GPUs
                assert ds.num_gpus() == REAL_GPUS[ds_backend]
                assert str(ds.neutral_device(scalar(ds_backend, ds_device))) == "cpu:0"
            else:
                assert ds.num_gpus() == 2
    """)
    result = fresh("--devshim-backend", "all", "--devshim-virtual-devices", "2", "-rfs", "-p", "no:cacheprovider")
    virtual = [name for name in ds.available_backends() if specs()[name].virtual_devices]
    flat = [name for name in ds.available_backends() if name not in virtual]
    guarded = [name for name in virtual if specs()[name].has_module("guard")]  # the others' reads go unseen
    result.stdout.fnmatch_lines([f"devshim: backend* {', '.join(ds.available_backends())} (--devshim-backend); "
                                 "2 virtual GPUs (--devshim-virtual-devices 2)"])
    result.stdout.fnmatch_lines_random(
        [f"devshim {name} devices: cpu:0, gpu:0 (virtual), gpu:1 (virtual)" for name in virtual]
        + [f"devshim {name} devices: cpu:0 (no virtual GPUs: its tests run on its CPU)" for name in flat])
    result.stdout.fnmatch_lines_random([f"FAILED *::test_implicit_read[[]{name}[]]*" for name in guarded])
    refused = [line for line in result.stdout.lines if line.startswith("E   ") and "ImplicitTransferError: " in line]
    assert len(refused) == len(guarded) and all(
        "reads a tensor on gpu:0 on the host: an implicit device-to-host copy, refused by ds.transfer_guard "
        "at " in line for line in refused), refused
    skipped = [line.split(": ", 1)[1] for line in result.stdout.lines if line.startswith("SKIPPED [1]")]
    assert sorted(skipped) == sorted(
        [f"needs 3 GPUs: {name} has 2 here (2 virtual GPUs (--devshim-virtual-devices 2)); "
         f"run with --devshim-virtual-devices 3" for name in virtual]
        + [f"needs {n} GPUs: {name} has no virtual devices; its tests run on its CPU in this run (2 virtual GPUs "
           f"(--devshim-virtual-devices 2))" for name in flat for n in (2, 2, 3)])
    # A backend without virtual devices runs the rest on its CPU: its reads are host reads, never refused.
    result.assert_outcomes(passed=6 * len(virtual) - len(guarded) + 4 * len(flat), failed=len(guarded),
                           skipped=len(virtual) + 3 * len(flat))


def test_the_virtual_device_count_from_the_ini_file_with_the_selected_backend(pytester, fresh):
    name = selected()
    pytester.makeini("[pytest]\ndevshim_virtual_devices = 1\n")
    pytester.makepyfile("""
        import pytest
        import devshim as ds

        @pytest.mark.gpus(1)
        def test_one(ds_backend, ds_devices):
            assert ds.num_gpus() == 1 and len(ds_devices) == 1
    """)
    result = fresh("-rs", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines([f"devshim: backend {name} (*); 1 virtual GPU (devshim_virtual_devices in tox.ini)"])
    if specs()[name].virtual_devices:
        result.stdout.fnmatch_lines([f"devshim {name} devices: cpu:0, gpu:0 (virtual)"])
        result.assert_outcomes(passed=1)
    else:
        result.stdout.fnmatch_lines([f"devshim {name} devices: cpu:0 (no virtual GPUs: its tests run on its CPU)",
                                     f"SKIPPED [[]1[]] *: needs 1 GPU: {name} has no virtual devices; its tests run on "
                                     f"its CPU in this run (1 virtual GPU (devshim_virtual_devices in tox.ini))"])
        result.assert_outcomes(skipped=1)


def test_virtual_devices_a_started_framework_cannot_give_fail_the_test_saying_why(pytester, fresh, monkeypatch):
    name = selected()
    starts = load_harness(name).starts_devices_code if name in backends_with_harness() else None
    if starts is None:  # how a conftest starts a framework that fixes its devices when it starts
        pytest.skip(f"{name} can present virtual devices at any time (or has none)")
    monkeypatch.delenv(settings.VIRTUAL_DEVICES_VAR, raising=False)
    pytester.makeconftest(starts)  # conftests are imported before the plugin configures
    pytester.makepyfile("""
        import pytest

        def test_devices(ds_devices):
            raise AssertionError("ran on the wrong devices")

        @pytest.mark.gpus(2)
        def test_two():
            raise AssertionError("ran on the wrong devices")
    """)
    result = fresh("--devshim-virtual-devices", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines([f"devshim: the {name} backend cannot give this run its devices (2 virtual GPUs "
                                 f"(--devshim-virtual-devices 2)): *2 virtual GPUs*too late to add them*"] * 2)

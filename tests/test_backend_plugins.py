"""A backend that lives outside devshim, in a package of its own: found through the
`devshim.backends` entry point by `DEVSHIM_BACKEND`, `devshim info`, dispatch and the pytest
plugin, as devshim's own folders are; an entry point that cannot be used is left out with a
`BackendPluginWarning` saying why, and the other backends work on.

The packages here are written into a temporary folder as pip installs them (the package, and its
distribution's metadata with the entry points), and used in fresh interpreters that have it on
their path. The backend is docs/adapters.md's minimal one, its two files taken from the page as
printed, over a small stand-in for an array-API framework. An installed plug-in (the tox env of
tests/plugin_backend/ installs it) is checked here too, and runs devshim's conformance suite in
that env."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
import urllib.parse
from pathlib import Path

import pytest

import devshim as ds
from devshim.backends import specs
from helpers import _python, run_python

ROOT = Path(__file__).resolve().parent.parent

#: A stand-in for an array-API framework with one device (its arrays wrap NumPy's).
FRAMEWORK = '''
import numpy as _np


class Device:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"myfw.Device({self.name!r})"


CPU = Device("cpu")


class Array:
    def __init__(self, data, device=CPU):
        self._data, self.device = _np.asarray(data), device

    def __array_namespace__(self, api_version=None):
        import myfw

        return myfw

    def __dlpack__(self, **kwargs):
        return self._data.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()

    @property
    def shape(self):
        return self._data.shape


class _Info:
    def devices(self):
        return [CPU]

    def default_device(self):
        return CPU


def __array_namespace_info__():
    return _Info()


def asarray(x, device=None, copy=None):
    data = x._data if isinstance(x, Array) else _np.asarray(x)
    return Array(data.copy() if copy else data, device or CPU)
'''


def skeleton() -> dict:
    """docs/adapters.md's minimal backend: relative path -> the file as printed there."""
    page = (ROOT / "docs" / "adapters.md").read_text(encoding="utf-8")
    files = dict(re.findall(r"^<!-- file: (\S+) -->\n```py\n(.*?)^```", page, re.S | re.M))
    assert sorted(files) == ["devshim_mine/__init__.py", "devshim_mine/core.py"]
    return files


def distribution(folder: Path, name: str, entry_points: dict, files: dict) -> None:
    """Write `files` (path -> text) and the metadata of a distribution `name` declaring
    `entry_points` (group -> {name: value}) into `folder`, as pip would install them."""
    for path, text in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text, encoding="utf-8")
    info = folder / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(
        "".join(f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in entries.items()) + "\n"
                for group, entries in entry_points.items()), encoding="utf-8")


@pytest.fixture
def site(tmp_path):
    """A folder of installed packages: docs/adapters.md's `mine` backend, and the framework it is for."""
    distribution(tmp_path, "myfw", {}, {"myfw.py": FRAMEWORK})
    distribution(tmp_path, "devshim_mine", {"devshim.backends": {"mine": "devshim_mine"}}, skeleton())
    return tmp_path


def python(folder: Path, code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`code` (or `python *args`) in a fresh interpreter with `folder` on its path, run there.
    The path this one was given stays behind them: where devshim is not installed but put on the
    path with its metadata (tools/gpu_check.py does so), that is where its pytest plugin is found."""
    home = os.path.dirname(os.path.dirname(os.path.abspath(ds.__file__)))
    paths = [str(folder), home, os.environ.get("PYTHONPATH", "")]
    command, full_env = _python(code, args, {**env, "PYTHONPATH": os.pathsep.join(path for path in paths if path)})
    return subprocess.run(command, capture_output=True, text=True, env=full_env, cwd=folder, timeout=300)


@pytest.mark.same_in_every_pass  # a fresh interpreter with DEVSHIM_BACKEND=mine
def test_the_minimal_backend_of_the_docs_is_found_through_its_entry_point_and_used(site):
    result = python(site, """
        import warnings
        warnings.simplefilter("error")
        import devshim as ds, myfw
        x = myfw.asarray([1.0, 2.0])
        print(ds.get_backend().name, ds.backends.specs()["mine"].package, "mine" in ds.available_backends())
        y = ds.to_device({"x": x}, "cpu")["x"]
        print(type(y).__name__, ds.device_of(x) is myfw.CPU, ds.neutral_device(y), ds.to_numpy(y).tolist())
        print(ds.same_device(x, y), y is not x, ds.copy_if_needed(x, ds.cpu()) is x)
        with ds.transfer_guard("disallow") as report:
            ds.to_device(x, ds.cpu())
        print(report.total, ds.backends.backend_for_tensor(x).name)
    """, DEVSHIM_BACKEND="mine")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["mine devshim_mine True", "Array True cpu:0 [1.0, 2.0]",
                                          "True True True", "0 mine"]


@pytest.mark.same_in_every_pass  # a fresh interpreter with DEVSHIM_BACKEND=mine
def test_devshim_info_lists_it_with_its_capabilities(site):
    result = python(site, "", "-m", "devshim", "info", DEVSHIM_BACKEND="mine")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "backend: mine  (DEVSHIM_BACKEND=mine)" in result.stdout
    assert re.search(r"^  mine +yes +- +- +- +- +- +- +-$", result.stdout, re.M), result.stdout


@pytest.mark.same_in_every_pass  # a fresh interpreter with DEVSHIM_BACKEND=mine
def test_the_pytest_plugin_runs_a_test_on_it(site):
    (site / "test_on_mine.py").write_text(textwrap.dedent("""
        import devshim as ds
        import myfw

        def test_copy(ds_backend, ds_device):
            assert ds_backend == ds.get_backend().name == "mine"
            assert ds.neutral_device(ds.to_device(myfw.asarray([1.0]), ds_device)) == ds.cpu()
    """), encoding="utf-8")
    result = python(site, "", "-m", "pytest", "test_on_mine.py", "-v", "-p", "no:cacheprovider",
                    "--devshim-backend", "mine")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "devshim: backend mine (--devshim-backend)" in result.stdout
    assert "test_on_mine.py::test_copy[mine] PASSED" in result.stdout


BROKEN = {
    "an_import_error": ("fails", "raise ImportError('no such thing')", "could not be imported (ImportError: no such thing)"),
    "no_spec": ("nospec", "VALUE = 1", "names no BackendSpec"),
    "another_name": ("other", "from devshim.backends.spec import BackendSpec\n"
                     "SPEC = BackendSpec('elsewhere', title='E', import_name='e')", "declares a backend named 'elsewhere'"),
    "a_taken_name": ("numpy", "from devshim.backends.spec import BackendSpec\n"
                     "SPEC = BackendSpec('numpy', title='N', import_name='numpy')", "a backend devshim has already"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_an_entry_point_that_cannot_be_used_is_left_out_saying_why(tmp_path, case):
    name, source, why = BROKEN[case]
    distribution(tmp_path, f"broken_{case}", {"devshim.backends": {name: f"broken_{case}"}},
                 {f"broken_{case}.py": source + "\n"})
    result = python(tmp_path, """
        import warnings
        import numpy as np
        import devshim as ds
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            names = ds.backends.backend_names()
        print(" | ".join(str(w.message) for w in caught if w.category is ds.BackendPluginWarning))
        print(ds.backends.specs()["numpy"].package, ds.to_numpy(ds.to_device(np.ones(2), "cpu")).tolist())
    """)
    assert result.returncode == 0, result.stderr
    warned, works = result.stdout.splitlines()
    assert why in warned and f"broken_{case}" in warned and "left out" in warned, warned
    assert works == "devshim.backends.numpy [1.0, 1.0]"


# ------------------------------------------------------------ the installed plug-ins

def plugins() -> list:
    """The backends installed packages declare (none but in the tox env of tests/plugin_backend)."""
    return [name for name, spec in specs().items() if not spec.package.startswith("devshim.backends.")]


def installed_from(name: str):
    """The folder the package declaring backend `name` was installed from (pip's record of it,
    PEP 610), or None when it came from elsewhere."""
    from importlib import metadata

    distribution = next(found for entry, _, found in ds.backends.registry.installed_plugins() if entry == name)
    record = metadata.distribution(distribution).read_text("direct_url.json")
    url = json.loads(record)["url"] if record else ""
    return Path(urllib.parse.urlparse(url).path).resolve() if url.startswith("file:") else None


@pytest.mark.parametrize("name", plugins() or [pytest.param(None, marks=pytest.mark.skip(
    reason="no backend of an installed package here (the tox env of tests/plugin_backend installs one)"))])
def test_an_installed_backend_is_found_by_name_and_named_only_in_its_own_files(name):
    spec = specs()[name]
    result = run_python("import devshim as ds; print(ds.get_backend().name, ds.backends.specs()[ds.get_backend().name].package)",
                        DEVSHIM_BACKEND=name)
    assert result.returncode == 0 and result.stdout.split() == [name, spec.package], result.stderr
    source = installed_from(name)
    if source is None or ROOT not in source.parents:
        pytest.skip(f"{name} is not one of devshim's test packages")
    # Built from devshim's own tests (tests/plugin_backend): its name is in its folder and its tox env
    # alone, as a backend's must be.
    listing = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if listing.returncode != 0:
        pytest.skip(f"devshim's files are not a git checkout here: {listing.stderr.strip()}")
    listed = listing.stdout.split()
    word = re.compile(rf"\b{re.escape(name)}\b")
    naming = sorted(path for path in listed if path != "tox.ini" and not (ROOT / path).is_relative_to(source)
                    and word.search((ROOT / path).read_text(encoding="utf-8", errors="replace")))
    assert naming == []

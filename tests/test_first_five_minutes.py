"""What a new user meets first: the README's first install line gives a working install for the
framework its Hello shows, its test command says how long it takes and ends in a summary that
fits a screen (skips counted, not listed), a missing GPU's error says how to get virtual ones,
and `devshim info` says which frameworks are not installed."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import devshim as ds
from devshim import cli, settings
from devshim.backends import specs

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _blocks(text: str, language: str) -> list:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def test_the_hellos_install_line_brings_the_extra_of_the_framework_it_shows_and_pytest():
    """The Hello imports one framework; its `pip install -e` line installs devshim with that
    framework's extra (array-api-compat for torch: without it the testing page's ExpAdd failed
    with BackendError and the selftest skipped a check) and pytest, for the testing page."""
    hello = _section("Hello")
    code = _blocks(hello, "python")[0]
    imported = [name for name in re.findall(r"^import (\w+)", code, re.M) if name != "devshim"]
    shown = [name for name, spec in specs().items() if name in imported]
    assert len(shown) == 1, imported
    install = [line.split(" #")[0].split() for line in _blocks(hello, "bash")[0].splitlines()
               if line.startswith("pip install -e")]
    assert len(install) == 1, install
    extras = re.findall(r'"\.\[([\w,-]+)\]"', " ".join(install[0]))
    assert extras and shown[0] in extras[0].split(","), install[0]
    assert "pytest" in install[0]
    try:
        declared = importlib.metadata.metadata("devshim").get_all("Provides-Extra") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("devshim is not installed here (its extras come from the installed metadata)")
    assert shown[0] in declared


def test_the_test_commands_say_how_long_they_take():
    commands = [line for block in _blocks(_section("Test"), "bash") for line in block.splitlines()
                if line.startswith("tox")]
    assert commands, "the README's Test section shows no tox command"
    for line in commands:
        assert re.search(r"about \d+ minutes", line), f"{line!r} does not say how long it takes"


@pytest.mark.skipif(os.environ.get("DEVSHIM_BACKEND") != "numpy",
                    reason="pytest's summary is the same on every backend: checked once, where NumPy is selected")
@pytest.mark.same_in_every_pass  # a pytest run in a fresh interpreter, of this file's own test
def test_the_suites_summary_counts_skips_and_lists_none():
    """pyproject.toml asks pytest to list failures and errors only; conftest's line under the
    counts says how many were skipped and how to list them."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           f"{Path(__file__).relative_to(ROOT)}::test_a_skip_for_the_summary_test"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert not [line for line in lines if line.startswith("SKIPPED")], done.stdout
    assert [line for line in lines if line.startswith("1 skipped: pytest -rs lists each with its reason")], done.stdout
    assert re.search(r"\b1 skipped in [\d.]+s", lines[-1]), lines[-1]


def test_a_skip_for_the_summary_test():
    """Skipped always: what the test above counts."""
    pytest.skip("the summary test's skip")


def test_a_missing_gpu_says_how_to_have_virtual_ones(harness):
    index = ds.num_gpus()  # one past the GPUs there are, real or virtual
    with pytest.raises(ds.DeviceUnavailableError) as caught:
        ds.gpu(index)
    message = str(caught.value)
    assert f"gpu:{index} is not available" in message and settings.VIRTUAL_DEVICES_VAR in message
    virtual = settings.virtual_device_count()
    if specs()[harness.name].virtual_devices:
        wanted = f"set it to {index + 1} or more" if virtual else f"{settings.VIRTUAL_DEVICES_VAR}={max(2, index + 1)}"
        assert wanted in message, message
    else:
        assert f"The {harness.name} backend has no virtual GPUs" in message
        assert all(name in message for name, spec in specs().items() if spec.virtual_devices)


def test_info_says_not_installed_where_a_framework_is_absent(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    table = out.split("\ncapabilities:\n", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    rows = {line.split()[0]: line.split(None, 1)[1] for line in table}
    assert set(rows) == set(specs())
    for name, spec in specs().items():
        if spec.is_installed():
            assert "not installed" not in rows[name]
            assert rows[name].split()[0] in ("yes", "unusable")
        else:
            assert rows[name] == "not installed", (name, rows[name])

"""The README's commands, run as written (on the NumPy backend, once: in the numpy env)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from devshim import cli

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def shell_lines() -> list:
    """Every line of the README's ```bash blocks, without its comment."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.splitlines():
            command = line.split(" #", 1)[0].strip()
            if command and not command.startswith("#"):
                lines.append((command, line))
    return lines


def devshim_commands() -> list:
    """(the command, its whole README line) for each devshim command the README shows."""
    return [(c, line) for c, line in shell_lines()
            if c.startswith("devshim ") or c.startswith("python -m devshim ")]


def arguments(command: str) -> list:
    words = shlex.split(command)
    return words[3:] if words[:3] == ["python", "-m", "devshim"] else words[1:]


def test_the_readme_shows_devshim_commands():
    shown = [arguments(c)[:2] for c, _ in devshim_commands()]
    assert ["info"] in shown and ["bench", "matmul"] in shown and len(shown) >= 4


@pytest.mark.parametrize("command, line", devshim_commands(), ids=lambda v: v if "#" not in v else "")
def test_each_readme_command_parses_as_written(command, line):
    cli.build_parser().parse_args(arguments(command))  # a renamed command or flag exits 2 here


@pytest.mark.parametrize("command, line", devshim_commands(), ids=lambda v: v if "#" not in v else "")
def test_a_readme_command_that_needs_an_extra_says_which(command, line):
    if "--plot" in command:
        assert "[plot]" in line, f"the README line {line!r} plots but does not name the [plot] extra"
        assert 'pip install -e ".[plot]"' in README  # and the install section shows how


@pytest.mark.skipif(os.environ.get("DEVSHIM_BACKEND") != "numpy",
                    reason="the README's commands run once, in the numpy env (the core install)")
@pytest.mark.parametrize("command, line", devshim_commands(), ids=lambda v: v if "#" not in v else "")
def test_each_readme_command_runs_as_written(command, line, tmp_path):
    """As a user types it: the `devshim` script where it is installed, else `python -m devshim`,
    in a fresh folder (the plot lands there)."""
    if "--plot" in command:
        pytest.importorskip("matplotlib")

    script = shutil.which("devshim", path=os.path.dirname(sys.executable)) or shutil.which("devshim")
    words = shlex.split(command)
    if words[0] == "devshim":
        argv = [script] + words[1:] if script else [sys.executable, "-m", "devshim"] + words[1:]
    else:
        argv = [sys.executable] + words[1:]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command!r} exited {done.returncode}: {done.stderr[-2000:]}"
    if "--plot" in command:
        assert (tmp_path / shlex.split(command)[-1]).stat().st_size > 0


def test_the_readme_names_the_torch_range_that_pyproject_gives():
    tomllib = pytest.importorskip("tomllib")
    torch = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"]["torch"]
    framework = next(r for r in torch if re.match(r"torch\b", r))
    assert f"({framework})" in README
    guide = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    assert f"`{framework}`" in guide, "docs/getting-started.md must quote pyproject's torch requirement"


@pytest.mark.same_in_every_pass
def test_the_first_screen_shows_an_install_and_the_hello_programs_output():
    """The README opens with a result: an install, a short program and what it prints, checked
    here by running it (on the CPU, as its text says; with two virtual GPUs, as it says too)."""
    first_screen = "\n".join(README.splitlines()[:45])
    assert "pip install" in first_screen and "```python" in first_screen and "```text" in first_screen
    code = re.search(r"## Hello\n.*?```python\n(.*?)```", README, re.S).group(1)
    printed = re.search(r"## Hello\n.*?```text\n(.*?)```", README, re.S).group(1)
    assert len(code.strip().splitlines()) <= 9
    pytest.importorskip("torch")
    from helpers import run_python

    on_the_cpu = run_python(code, DEVSHIM_DEVICE="cpu")
    assert on_the_cpu.returncode == 0, on_the_cpu.stderr
    assert on_the_cpu.stdout == printed
    two = run_python(code, DEVSHIM_VIRTUAL_DEVICES="2")
    assert two.stdout.splitlines()[0] == "gpu:0 gpu:1 True" and "`gpu:0 gpu:1 True`" in README

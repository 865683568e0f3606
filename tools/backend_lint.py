"""The lint's lists of backends, read from devshim/backends/ when the lint runs, so that a new
backend folder is checked with no edit to pyproject.toml:

- import-linter contract types: in a layer, ``{backend folders}`` stands for every backend folder
  as independent siblings ("cupy | jax | ..."); among forbidden modules, ``{backend frameworks}``
  for each backend's framework (its ``SPEC.import_name``), and ``{backend frameworks} but numpy``
  for each but those named;
- ``python tools/backend_lint.py ruff check ...`` runs ruff with each backend's framework added to
  the libraries pyproject.toml bans at module level (TID253).

Example (``tox -e lint`` puts the project on ``PYTHONPATH``):
    [tool.importlinter]
    contract_types = ["backend_layers: tools.backend_lint.BackendLayersContract"]
    [[tool.importlinter.contracts]]
    type = "backend_layers"
    containers = ["devshim.backends"]
    layers = ["{backend folders}", "registry"]

    $ python tools/backend_lint.py ruff check devshim tests
"""

from __future__ import annotations

import importlib
import json
import pathlib
import subprocess
import sys

from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.layers import LayersContract

FOLDERS = "{backend folders}"
FRAMEWORKS = "{backend frameworks}"


def backend_rows() -> dict:
    """folder -> the `BackendSpec` its `__init__.py` declares (imports no framework)."""
    from devshim.backends.registry import backend_folders

    return {folder: importlib.import_module(f"devshim.backends.{folder}").SPEC for folder in backend_folders()}


def expand(value, rows: dict):
    """A contract option with the placeholders replaced by what the backend folders hold."""
    if isinstance(value, str):
        return value.replace(FOLDERS, " | ".join(rows))
    if isinstance(value, list):
        return [name for item in value for name in _frameworks(item, rows)]
    return value


def _frameworks(item: str, rows: dict) -> list:
    """``{backend frameworks}`` (optionally ``... but numpy, cupy``: those left out) as a list."""
    if not item.startswith(FRAMEWORKS):
        return [expand(item, rows)]
    kept = {name.strip() for name in item[len(FRAMEWORKS):].strip().removeprefix("but").split(",") if name.strip()}
    return sorted({spec.import_name for spec in rows.values()} - kept)


class _FromFolders:
    def __init__(self, name: str, session_options: dict, contract_options: dict) -> None:
        rows = backend_rows()
        options = {key: expand(value, rows) for key, value in contract_options.items()}
        super().__init__(name, session_options, options)  # type: ignore[call-arg]


class BackendLayersContract(_FromFolders, LayersContract):
    """A `layers` contract in which ``{backend folders}`` is every backend folder."""


class FrameworksForbiddenContract(_FromFolders, ForbiddenContract):
    """A `forbidden` contract in which ``{backend frameworks}`` is every backend's framework."""


_BANNED = "lint.flake8-tidy-imports.banned-module-level-imports"


def ruff(args: list) -> int:
    """Run ruff with `args`, every backend's framework banned at module level besides the
    libraries pyproject.toml names there."""
    import tomllib

    root = pathlib.Path(__file__).resolve().parent.parent
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    banned = config["tool"]["ruff"]["lint"]["flake8-tidy-imports"]["banned-module-level-imports"]
    frameworks = sorted({spec.import_name for spec in backend_rows().values()} | set(banned))
    return subprocess.call([*args, "--config", f"{_BANNED} = {json.dumps(frameworks)}"])


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))  # devshim's source
    sys.exit(ruff(sys.argv[1:]))

"""docs/adapters.md's "The path of a call" stays true: each capability's walk, a line per file.

Every file a walk names exists and defines the functions the line names; no walk names a file
twice or more than five files; and each walk only goes down the layers that `pyproject.toml`'s
import-linter contracts declare (`tox -e lint` checks the imports themselves).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^(devshim/\S+\.py)\s+([\w.]+(?:, [\w.]+)*):\s")


def walks() -> dict:
    """The walks of the section: the paragraph before each block -> its (file, names) lines."""
    page = (ROOT / "docs" / "adapters.md").read_text(encoding="utf-8")
    section = page.split("## The path of a call\n", 1)[1].split("\n## ", 1)[0]
    found = {}
    parts = section.split("```")
    for text, block in zip(parts[0::2], parts[1::2]):
        before = " ".join(text.strip().split("\n\n")[-1].split())  # the paragraph the block follows
        lines = [LINE.match(line) for line in block.splitlines() if line.strip()]
        assert all(lines), f"a line of the walk after {before!r} is not 'FILE  FUNCTIONS: what happens there'"
        found[before] = [(match.group(1), match.group(2).split(", ")) for match in lines if match]
    return found


def defined(path: Path) -> set:
    """Every function and class `path` defines, by name and as `Class.member`."""
    names = set()

    def visit(node, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(child.name)
                if owner:
                    names.add(f"{owner}.{child.name}")
                visit(child, child.name if isinstance(child, ast.ClassDef) else owner)
            else:
                visit(child, owner)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return names


def layer_of(path: str, contracts: list) -> tuple:
    """(the layer's position in the devshim-wide contract, its position inside the backends)."""
    module = path[:-3].replace("/", ".").removesuffix(".__init__")
    top = next(c for c in contracts if c["type"] == "layers")["layers"]
    inner = next(c for c in contracts if c["type"] == "backend_layers")["layers"]

    def position(layers: list, name: str) -> int:
        for index, layer in enumerate(layers):
            for member in re.split(r"[|:]", layer):
                member = member.strip()
                if name == member or name.startswith(member + "."):
                    return index
        raise AssertionError(f"{name} is in no layer of {layers}")

    outer = position(top, module)
    if not module.startswith("devshim.backends."):
        return outer, 0
    return outer, position(inner, module.split(".")[2])


def test_the_page_maps_every_capability_of_issue_48():
    said = " ".join(walks())
    for capability in ("ds.to_device", "ds.copy_if_needed", "ds.convert", "ds.memory", "assert_allclose",
                       "check_backward", "numerical_grad", "ds.transfer_guard"):
        assert capability in said, capability


@pytest.mark.parametrize("before", list(walks()), ids=lambda before: before[:40])
def test_each_file_named_defines_the_functions_named(before):
    for file, names in walks()[before]:
        path = ROOT / file
        assert path.is_file(), file
        missing = set(names) - defined(path)
        assert not missing, f"{file} defines no {sorted(missing)} (the walk after {before!r})"


@pytest.mark.parametrize("before", list(walks()), ids=lambda before: before[:40])
def test_a_walk_goes_down_through_five_files_at_most_each_entered_once(before):
    files = [file for file, _ in walks()[before]]
    assert len(files) <= 5 and len(set(files)) == len(files), files
    tomllib = pytest.importorskip("tomllib")  # (Python 3.11 and later)
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    layers = [layer_of(file, contracts) for file in files]
    assert layers == sorted(layers), f"the walk after {before!r} climbs back up a layer: {list(zip(files, layers))}"

"""The docs agree with the code: the API reference covers every public name, every documented
function and method has an example, the capability table is the registry's, and every python
example of the README and docs/*.md runs as printed (or is on the reviewed list of those not
meant to run). (`tox -e docs` builds the site itself, strictly.)"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import typing
from pathlib import Path

import pytest

import devshim as ds
from devshim import settings
from devshim.backends import specs
from helpers import _python

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"
DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.M)


def directives() -> list:
    return [name for page in sorted(REFERENCE.glob("*.md")) for name in DIRECTIVE.findall(page.read_text())]


def resolve(path: str):
    """The object a ``::: a.b.c`` directive names (a module, or an attribute of one)."""
    try:
        return importlib.import_module(path)
    except ImportError:
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)


def has_example(obj) -> bool:
    doc = inspect.getdoc(obj) or ""
    return ">>>" in doc or "Example" in doc


def documented_objects() -> list:
    """(label, object) for everything the reference renders: each directive's object, a
    class's public methods and properties, a module's listed or public members."""
    found = []
    for path in directives():
        obj = resolve(path)
        if inspect.ismodule(obj):
            members = getattr(obj, "__all__", [])
            # (a type alias, devshim.types', is Any at run time: its docstring is the module's text)
            found += [(f"{path}.{n}", getattr(obj, n)) for n in members
                      if callable(getattr(obj, n)) and getattr(obj, n) is not typing.Any]
            continue
        found.append((path, obj))
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for name, member in vars(obj).items():
                if not name.startswith("_") and (inspect.isfunction(member) or isinstance(member, property)):
                    found.append((f"{path}.{name}", member))
    return found


def test_every_public_name_is_in_the_api_reference():
    named = {path.rpartition(".")[2] for path in directives()}
    modules = {path for path in directives() if inspect.ismodule(resolve(path))}
    missing = []
    for name in ds.__all__:
        value = getattr(ds, name)
        if inspect.ismodule(value):
            continue
        in_module = any(name in getattr(importlib.import_module(m), "__all__", []) for m in modules)
        if name not in named and not in_module:
            missing.append(name)
    assert not missing, f"not in docs/reference/*.md: {missing}"


@pytest.mark.parametrize("label, obj", documented_objects(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_documented_function_has_an_example(label, obj):
    assert has_example(obj), f"{label}'s docstring has no example"


def test_the_backends_page_and_the_navigation_list_the_registrys_backends_each_with_its_page():
    """docs/backends.md's tables and the navigation's Backends section are made from the backend
    folders when the site is built (tools/docs_backends.py, an mkdocs hook): each folder needs its
    page, docs/<name>.md, and nothing else in the docs."""
    spec = importlib.util.spec_from_file_location("docs_backends", ROOT / "tools" / "docs_backends.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = (ROOT / "docs" / "backends.md").read_text()
    rendered = hook.on_page_markdown(page, None, None, None)
    assert all(marker in page and marker not in rendered for marker in hook.MARKERS.values())
    folders = ds.backends.registry.backend_folders()
    assert sorted(hook.rows()) == folders and all((ROOT / "docs" / f"{name}.md").is_file() for name in folders)
    for name, row in hook.rows().items():
        capabilities = ["yes" if v else "-" for v in row.capabilities().values()]
        assert f"| {name} | {' | '.join(capabilities)} |" in rendered
        assert f"| `{name}` |" in rendered and f"]({name}.md) |" in rendered
    nav = {"nav": [{"Backends": ["backends.md"]}]}
    hook.on_config(type("Config", (), nav)())
    assert nav["nav"][0]["Backends"] == ["backends.md"] + [{row.title: f"{name}.md"} for name, row in hook.rows().items()]


def test_the_readme_links_the_docs():
    readme = (ROOT / "README.md").read_text()
    assert "docs/getting-started.md" in readme and "tox -e docs" in readme


# ------------------------------------------------------------------ the examples, run as printed

PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
#: A fenced python block, with the one-line HTML comment (unseen on the site) right above it, if any.
FENCE = re.compile(r"(?:^<!--(?P<note>[^\n]*?)-->\n)?^```python\n(?P<code>.*?)^```", re.S | re.M)
SNIPPET = re.compile(r'^--8<-- "(?P<path>[^"]+)"\s*$')
#: Where each framework's examples run under tox: its own env; those of several frameworks run
#: in the interop env, those of none (devshim and NumPy) in the numpy env. Outside tox, each runs
#: wherever its frameworks are installed.
#: (Each backend's framework but one devshim always installs, which has no extra: NumPy.)
FRAMEWORKS = tuple(spec.import_name for spec in specs().values() if spec.extra) + ("horovod",)
#: The reviewed list of blocks that are not meant to run, each marked in its page with
#: ``<!-- not run: why -->`` right above the block: (page, first line of code) -> why.
FRAGMENTS = {
    ("docs/distributed.md", "import torch"):
        "the shape of a DDP training script (net, dataset, epochs are the reader's); "
        "examples/ddp.py is the complete program, run by tests/test_distributed.py",
    ("docs/distributed.md", "import horovod.tensorflow as hvd"):
        "needs Horovod and horovodrun, which CI does not install",
    ("docs/distributed.md", "import os"):
        "needs a launcher's variables (MASTER_ADDR, ranks) and several processes",
}
#: A trailing comment that starts with an exception's name says the line raises it.
RAISES = re.compile(r"#\s*(?:[\w.]+\.)?(?P<name>[A-Z]\w*(?:Error|Exception))\b")

# Runs one block as a script, statement by statement, in one namespace; a statement whose
# first or last line ends with a comment naming an exception must raise that exception.
RUNNER = r'''
import ast, io, re, sys, tokenize
path, pattern = sys.argv[1], re.compile(sys.argv[2])
source = open(path, encoding="utf-8").read()
comments = {t.start[0]: t.string for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type == tokenize.COMMENT}
namespace = {"__name__": "__main__", "__file__": path}
for statement in ast.parse(source).body:
    said = [pattern.match(comments.get(n, "")) for n in (statement.lineno, statement.end_lineno)]
    expected = next((m.group("name") for m in said if m), None)
    code = compile(ast.Module([statement], type_ignores=[]), path, "exec")
    try:
        exec(code, namespace)
    except BaseException as error:
        if expected is None or expected not in {c.__name__ for c in type(error).__mro__}:
            raise
        continue
    if expected is not None:
        raise AssertionError(f"line {statement.lineno} says it raises {expected}, but it ran")
'''


def python_command(args: list, env: dict) -> tuple:
    """(command, environment) of a fresh interpreter importing this devshim, whose only DEVSHIM_
    variables are ``env``: a reader's plain shell (tests/helpers.py's ``run_python``)."""
    return _python("", tuple(args), env)


class Block:
    """One fenced python block of a page."""

    def __init__(self, page: Path, line: int, code: str, note: str) -> None:
        self.page, self.line, self.code, self.note = page.relative_to(ROOT).as_posix(), line, code, note.strip()
        first = next((line for line in code.splitlines() if line.strip()), "")
        self.first = first.strip()
        snippet = SNIPPET.match(self.first)
        self.snippet = snippet.group("path") if snippet else None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def env(self) -> dict:
        """The variables its first comment line says to run it with (``# DEVSHIM_...=N ...``)."""
        if not self.first.startswith("#"):
            return {}
        return dict(re.findall(r"\b(DEVSHIM_[A-Z_]+)=(\S+)", self.first))

    def frameworks(self) -> list:
        """The frameworks it imports, or names in a ``<!-- needs: a, b -->`` note, or by
        ``DEVSHIM_BACKEND=`` in its first line."""
        found = set(re.findall(rf"^\s*(?:import|from)\s+({'|'.join(FRAMEWORKS)})\b", self.code, re.M))
        found |= set(re.findall(rf"^\s*import\s+[\w, ]*\b({'|'.join(FRAMEWORKS)})\b", self.code, re.M))
        needs = re.match(r"needs:\s*(.*)", self.note)
        if needs:
            found |= {name.strip() for name in needs.group(1).split(",")}
        backend = self.env().get("DEVSHIM_BACKEND")
        if backend:
            found.add(backend)
        return sorted(found)

    def home(self) -> str:
        frameworks = self.frameworks()
        return "numpy" if not frameworks else frameworks[0] if len(frameworks) == 1 else "interop"

    def is_test_module(self) -> bool:
        return re.search(r"^def test_\w+\(", self.code, re.M) is not None


def blocks() -> list:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text[:match.start("code")].count("\n")
            found.append(Block(page, line, match.group("code"), match.group("note") or ""))
    return found


BLOCKS = blocks()


def test_the_pages_have_python_examples_and_the_skip_list_is_the_marked_blocks():
    assert len(BLOCKS) >= 40 and {b.page for b in BLOCKS} >= {"README.md", "docs/guard.md"}
    marked = {(b.page, b.first): b.note for b in BLOCKS if b.note.startswith("not run:")}
    assert set(marked) == set(FRAGMENTS), "every block marked <!-- not run: ... --> is in FRAGMENTS, and back"
    listed = [(b.page, b.first) for b in BLOCKS]
    assert all(listed.count(key) == 1 for key in FRAGMENTS), "a FRAGMENTS key names one block"


def test_an_included_example_file_is_run_by_the_examples_tests():
    from test_examples import PROJECTS, TESTED, TESTED_ELSEWHERE

    for block in (b for b in BLOCKS if b.snippet):
        path = Path(block.snippet)
        assert (ROOT / path).is_file(), f"{block.id} includes {path}, which does not exist"
        assert path.parts[0] == "examples", f"{block.id} includes {path}, outside examples/"
        assert path.name in TESTED | set(TESTED_ELSEWHERE) or path.parts[1] in PROJECTS, path


@pytest.mark.parametrize("block", [b for b in BLOCKS if not b.snippet], ids=lambda b: b.id)
def test_each_docs_example_runs_as_printed(block, tmp_path):
    """Each python block of the README and docs/*.md, as a script in a fresh interpreter (a
    block defining test functions: under pytest, with devshim's plugin), with only the
    DEVSHIM_ variables its first line names (a reader's plain shell otherwise); a line whose
    comment names an exception must raise it."""
    if block.note.startswith("not run:"):
        pytest.skip(f"{block.id} is marked not to run: {FRAGMENTS[(block.page, block.first)]}")
    if settings.virtual_device_count():
        pytest.skip("the examples name their own devices: they run in the plain pass")
    here = os.environ.get("TOX_ENV_NAME")
    if here is not None and here != block.home():
        pytest.skip(f"{block.id} runs in the {block.home()} env (its frameworks: {block.frameworks() or 'none'})")
    backend = os.environ.get("DEVSHIM_BACKEND")  # outside tox, one pass per backend (tools/gpu_check.py)
    if here is None and backend is not None and backend != block.home().replace("interop", "numpy"):
        pytest.skip(f"{block.id} runs in the pass whose DEVSHIM_BACKEND is {block.home().replace('interop', 'numpy')}")
    missing = [name for name in block.frameworks() if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"{block.id} needs {', '.join(missing)}, not installed here")
    script = tmp_path / ("test_example.py" if block.is_test_module() else "example.py")
    script.write_text(block.code, encoding="utf-8")
    if block.is_test_module():
        args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(script)]
    else:
        args = ["-c", RUNNER, str(script), RAISES.pattern]
    command, env = python_command(args, block.env())
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, f"{block.id} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


def test_docstrings_read_the_same_in_help_the_cli_and_the_docs_site():
    """Markdown's `code` renders on the docs site and reads as it is in help() and --help;
    reST's ``code`` showed its doubled backticks in both."""
    doubled = [f"{path.relative_to(ROOT)}:{number}" for path in sorted((ROOT / "devshim").rglob("*.py"))
               for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if "``" in line]
    assert not doubled, f"reST's double backticks in: {doubled[:10]}"

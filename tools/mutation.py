"""Mutation testing of `ds.memory`, `ds.testing`, timing's `compare` and the copy paths: does
the suite catch changed code? (`tox -e mutation`; CI does not run it.)

mutmut (pinned in tox.ini) makes small changes to the code named in `SELECTION` (a comparison
flipped, a number changed, a string, an argument or a step left out: each change one "mutant")
and runs, for each, the tests of `TESTS` that reach the changed function. A mutant is *caught*
when a test fails (or hangs, or the process dies); it *survives* when every test passes. The
score is the caught share of all mutants: survivors, mutants no test reaches and those explained
as equivalent all count against it. The env fails under `THRESHOLD`.

A survivor that cannot change what a user sees (an equivalent mutant) is explained in
`tools/mutation_equivalents.txt`, keyed by file, function and the changed line's text (not by
mutmut's numbers, which change when code moves), and reported as explained: still not caught.

mutmut runs in a copy of the checkout (`--workdir`, made afresh each run: mutmut keeps stale
copies of files it did not mutate otherwise), on torch with two virtual GPUs: virtual-GPU memory
and multi-device copies are reached there, and the numpy harness's tests run beside them
(docs/contributing.md says why this backend). After a run, `mutmut show NAME` and `mutmut browse`
in the work folder show any mutant.

    python tools/mutation.py --workdir .tox/mutation/tmp/mutmut       # run, report, exit 1 under 90%
    python tools/mutation.py --workdir ... --report-only             # the report of the last run
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = ROOT / "tools" / "mutation_equivalents.txt"
THRESHOLD = 0.90

#: What is mutated, by area: a file (every function in it), or `file:Class.function` (that one).
#: The copy paths are the functions `ds.to_device` and `ds.copy_if_needed` run below the public
#: API: the transfer door, the nest walk's leaves, the out-of-memory naming, and the one-tensor
#: paths and copies of the backend contract and of torch.
SELECTION = {
    "ds.memory": [
        "devshim/device_memory.py",
        "devshim/backends/memory_base.py",
        "devshim/backends/torch/memory.py",
        "devshim/backends/torch/_virtual/memory.py",
    ],
    "ds.testing": ["devshim/testing/*.py"],
    "timing.compare": ["devshim/timing/compare.py"],
    "copy paths": [
        "devshim/transfer.py",
        "devshim/backends/nests.py",
        "devshim/backends/out_of_memory.py",
        "devshim/backends/base.py:Backend.same_place",
        "devshim/backends/base.py:Backend.copier",
        "devshim/backends/base.py:Backend.copy_if_needed",
        "devshim/backends/base.py:Backend.target",
        "devshim/backends/base.py:Backend._cacheable",
        "devshim/backends/base.py:Backend.copy_fn",
        "devshim/backends/base.py:Backend.copy_if_needed_fn",
        "devshim/backends/base.py:Backend._one_tensor",
        "devshim/backends/torch/core.py:TorchBackend.same_place",
        "devshim/backends/torch/core.py:TorchBackend.copy_to",
        "devshim/backends/torch/core.py:TorchBackend._special_kind",
        "devshim/backends/torch/core.py:TorchBackend._special_advice",
    ],
}

#: The tests meant to catch them (mutmut runs, for each mutant, those of these that reach its function).
TESTS = [
    "tests/test_memory.py",
    "tests/devshim_conformance/test_contract_memory.py",
    "tests/test_testing_functions.py",
    "tests/test_chainer_gradient_check.py",
    "tests/devshim_conformance/test_contract_testing.py",
    "tests/test_timing.py",
    "tests/test_bench_verdicts.py",
    "tests/devshim_conformance/test_contract_nests.py",
    "tests/devshim_conformance/test_contract_tensors.py",
    "tests/devshim_conformance/test_contract_multi_device.py",
    "tests/devshim_conformance/test_contract_numpy_arrays.py",
    "tests/devshim_conformance/test_contract_native_devices.py",
    "tests/devshim_conformance/test_contract_misuse.py",
    "tests/devshim_conformance/test_contract_guard.py",
    "tests/test_tree.py",
    "tests/test_mutants_compare.py",
    "tests/test_mutants_memory.py",
    "tests/test_mutants_out_of_memory.py",
    "tests/test_mutants_memory_base.py",
    "tests/test_mutants_memory_peak.py",
    "tests/test_mutants_torch_memory.py",
    "tests/test_mutants_gradients.py",
    "tests/test_mutants_backend_base.py",
    "tests/test_mutants_testing.py",
    "tests/test_mutants_copy_paths.py",
]
#: Tests of these files that cannot see a mutant: they run devshim in a fresh interpreter, which
#: imports the unchanged copy installed in the env.
DESELECTED = ["tests/test_memory.py::test_the_size_set_for_the_process_reaches_a_fresh_interpreter"]
#: The backend and virtual GPUs the tests run on (the tox env sets the same). One OpenMP thread:
#: OpenMP's threads do not survive a fork (measured when mutmut forked each mutant from the process
#: that had run the suite: the forked tests spun until mutmut's CPU limit, every mutant of torch's
#: copies and storage resizes read as timed out, that is caught, when most survive). Kept under
#: the fork server below, where the server has run no torch operation; not measured without it.
ENVIRONMENT = {"DEVSHIM_BACKEND": "torch", "DEVSHIM_VIRTUAL_DEVICES": "2", "PYTHONHASHSEED": "0",
               "OMP_NUM_THREADS": "1"}
#: Where each mutant's tests are forked from: a server that has imported the tests but run none.
#: mutmut's default forks each from the process that ran every test once unmutated, whose
#: autograd engine has started its threads; torch refuses a backward pass in such a child
#: ("Unable to handle autograd's threading in combination with fork-based multiprocessing"), so
#: every mutant whose tests take one read as caught (measured: all 28 mutants of the torch
#: estimate's installed-folders list read as caught, and 3 of them passed their tests run alone).
ISOLATION = "forkserver"
#: A pytest plugin each session of the run loads, the fork server's first: it imports what the
#: torch tests import (torch, and torch._dynamo, which devshim's torch backend reaches through
#: torch.compiler), so that each mutant's child finds them imported, and moves them out of the
#: garbage collector's sight (measured: 6.4 s for the six tests of one function without, 1.5 s
#: with the imports, of which 0.7 s the tests' two gc.collect() walking torch's objects). Imports
#: only: a call would leave its result cached in the server, and a mutant of code run once per
#: process could not be seen.
WARMUP = "devshim_mutation_warmup"
WARMUP_TEXT = '''"""Imports the torch tests need, loaded by every pytest session of the mutation run."""
import gc

import torch  # noqa: F401
import torch._dynamo  # noqa: F401
import torch._subclasses.fake_tensor  # noqa: F401

import devshim.backends.torch.core  # noqa: F401
import devshim.backends.torch.memory  # noqa: F401

gc.freeze()  # what was imported is never garbage: each child's collections need not walk it
'''
#: What the tests read besides devshim/ and tests/ (mutmut copies pyproject.toml itself).
ALSO_COPY = ["docs", "examples", "README.md"]

CAUGHT = {"killed", "timeout", "segfault", "caught by type check"}
_SEPARATOR = "\u01c1"  # mutmut's "ǁ" between a class and its method in mutant names


# ------------------------------------------------------------------ the selection


def _files() -> list:
    return sorted({entry.split(":")[0] for entries in SELECTION.values() for entry in entries})


def _module(path: str) -> str:
    module = path[:-len(".py")].replace("/", ".")
    return module[:-len(".__init__")] if module.endswith(".__init__") else module


def _mangled(function: str) -> str:
    if "." in function:
        owner, name = function.split(".", 1)
        return f"x{_SEPARATOR}{owner}{_SEPARATOR}{name}"
    return f"x_{function}"


def _readable(mangled: str) -> str:
    """`xǁClassǁname` -> `Class.name`, `x_name` -> `name`."""
    if mangled.startswith("x" + _SEPARATOR):
        return mangled[2:].replace(_SEPARATOR, ".")
    return mangled[2:]


def area_of(path: str, function: str):
    """The area of `SELECTION` that mutant of `function` (readable) in `path` belongs to, or None."""
    for area, entries in SELECTION.items():
        for entry in entries:
            pattern, _, wanted = entry.partition(":")
            if fnmatch.fnmatch(path, pattern) and (not wanted or wanted == function):
                return area
    return None


def mutant_globs(areas=None) -> list:
    """The names `mutmut run` is given: a file's every mutant, or one function's (of `areas`, default all)."""
    globs = []
    for area, entries in SELECTION.items():
        if areas and area not in areas:
            continue
        for entry in entries:
            pattern, _, function = entry.partition(":")
            if pattern.endswith("/*.py"):  # every file of a folder
                globs.append(pattern[:-len("*.py")].replace("/", ".") + "*")
                continue
            module = _module(pattern)
            globs.append(f"{module}.{_mangled(function)}__mutmut_*" if function else f"{module}.*")
    return globs


def _toml_list(values) -> str:
    return "[" + ", ".join(json.dumps(value) for value in values) + "]"


def mutmut_config() -> str:
    """The [tool.mutmut] table the work folder's pyproject.toml gets."""
    selection = TESTS + [argument for node in DESELECTED for argument in ("--deselect", node)]
    return "\n".join([
        "", "[tool.mutmut]",
        'source_paths = ["devshim"]',
        f"only_mutate = {_toml_list(_files())}",
        f"also_copy = {_toml_list(ALSO_COPY + [WARMUP + '.py'])}",
        f"pytest_add_cli_args_test_selection = {_toml_list(selection)}",
        f'pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "{WARMUP}"]',
        f'process_isolation = "{ISOLATION}"',
        "",
    ])


# ------------------------------------------------------------------ running mutmut


def prepare(workdir: Path) -> None:
    """A fresh copy of what the tests need, with the mutmut configuration."""
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in ["devshim", "tests", *ALSO_COPY]:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, workdir / name, ignore=ignore)
        elif source.exists():
            shutil.copy2(source, workdir / name)
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    (workdir / "pyproject.toml").write_text(pyproject + mutmut_config(), encoding="utf-8")
    (workdir / f"{WARMUP}.py").write_text(WARMUP_TEXT, encoding="utf-8")


_RESULT_LINE = re.compile(r"^\S+ devshim\.\S+__mutmut_\d+$")
_SPINNER = re.compile("^[\u2800-\u28ff] ")  # mutmut redraws a line behind a spinner many times a second
#: Seconds between two of mutmut's progress lines passed on (it redraws one many times a second).
PROGRESS_EVERY = 30.0


def run_mutmut(workdir: Path, globs: list, jobs) -> int:
    """`mutmut run` in `workdir`, its output passed on but for its one line per mutant."""
    mutmut = Path(sys.executable).with_name("mutmut")
    command = [str(mutmut if mutmut.exists() else "mutmut"), "run"]
    if jobs:
        command += ["--max-children", str(jobs)]
    environment = {**os.environ, **ENVIRONMENT}
    process = subprocess.Popen(command + globs, cwd=workdir, env=environment, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, encoding="utf-8", errors="replace")
    assert process.stdout is not None
    shown, phase = 0.0, ""
    with open(workdir / "mutmut.log", "w", encoding="utf-8") as log:
        for line in process.stdout:  # text mode: mutmut's carriage returns end lines too
            text = line.strip()
            log.write(line)
            if _RESULT_LINE.match(text):
                continue
            if _SPINNER.match(text):
                now, this = time.monotonic(), "progress" if text[2:3].isdigit() else text[2:]
                if this == phase and now - shown < PROGRESS_EVERY:
                    continue
                shown, phase = now, this
            sys.stdout.write(line)
            sys.stdout.flush()
    return process.wait()


# ------------------------------------------------------------------ the results


class Mutant:
    """One mutant of the selection: where it is, what it changed, what became of it."""

    __slots__ = ("name", "path", "function", "area", "status", "removed", "added", "explained")

    def __init__(self, name: str, path: str, status: str) -> None:
        self.name, self.path, self.status = name, path, status
        self.function = _readable(name.rpartition(".")[2].partition("__mutmut_")[0])
        self.area = area_of(path, self.function)
        self.removed: list = []
        self.added: list = []
        self.explained = ""

    @property
    def caught(self) -> bool:
        return self.status in CAUGHT


def collect(workdir: Path) -> list:
    """Every mutant of the selection in the work folder's mutmut results."""
    from mutmut.stats import status_by_exit_code

    found = []
    for path in _selected_paths(workdir):
        meta = workdir / "mutants" / (path + ".meta")
        if not meta.exists():
            continue
        codes = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
        for name, code in codes.items():
            mutant = Mutant(name, path, status_by_exit_code[code])
            if mutant.area is not None:
                found.append(mutant)
    return found


def _selected_paths(workdir: Path) -> list:
    paths = set()
    for pattern in _files():
        paths.update(str(p.relative_to(workdir)) for p in workdir.glob(pattern))
    return sorted(paths)


def read_changes(workdir: Path, mutants: list) -> None:
    """The lines each mutant removed and added (mutmut's diff of its function)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    here = Path.cwd()
    os.chdir(workdir)
    try:
        for mutant in mutants:
            diff = get_diff_for_mutant(mutant.name, path=mutant.path).splitlines()
            mutant.removed = [_normal(line[1:]) for line in diff[2:] if line.startswith("-")]
            mutant.added = [_normal(line[1:]) for line in diff[2:] if line.startswith("+")]
    finally:
        os.chdir(here)


def _normal(line: str) -> str:
    return " ".join(line.split())


# ------------------------------------------------------------------ the explained survivors


class Explanation:
    """One block of `tools/mutation_equivalents.txt`: a file and function, the changed lines'
    text (`- ` removed, `+ ` added) and why the change cannot alter what a user sees."""

    __slots__ = ("path", "function", "removed", "added", "why", "line", "used")

    def __init__(self, path: str, function: str, line: int) -> None:
        self.path, self.function, self.line = path, function, line
        self.removed: list = []
        self.added: list = []
        self.why = ""
        self.used = 0

    def matches(self, mutant: Mutant) -> bool:
        return (self.path, self.function, self.removed, self.added) == (
            mutant.path, mutant.function, mutant.removed, mutant.added)


def read_explanations(path: Path = EQUIVALENTS) -> list:
    """The blocks of the equivalents file: a `path function` line, its `- `/`+ ` lines, a
    `why: ` line; blank lines between blocks, `#` comments."""
    found: list = []
    current = None
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if path.exists() else ():
        line = raw.strip()
        if not line or line.startswith("#"):
            current = None if not line else current
            continue
        if current is None:
            file, _, function = line.partition(" ")
            current = Explanation(file, function.strip(), number)
            found.append(current)
        elif line.startswith(("- ", "+ ")) or line in ("-", "+"):
            (current.removed if line[0] == "-" else current.added).append(_normal(line[1:]))
        elif line.startswith("why:"):
            current.why = line[len("why:"):].strip()
        else:
            current.why += " " + line
    return found


def explain(mutants: list, explanations: list) -> None:
    for mutant in mutants:
        if mutant.caught:
            continue
        for explanation in explanations:
            if explanation.matches(mutant):
                mutant.explained = explanation.why
                explanation.used += 1
                break


# ------------------------------------------------------------------ the report


def _table(rows: list) -> str:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        lines.append("  ".join(str(cell).ljust(widths[i]) if i == 0 else str(cell).rjust(widths[i])
                               for i, cell in enumerate(row)))
        if n == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _row(name: str, mutants: list) -> list:
    caught = sum(m.caught for m in mutants)
    survived = [m for m in mutants if not m.caught]
    explained = sum(bool(m.explained) for m in survived)
    no_tests = sum(m.status == "no tests" for m in survived)
    share = f"{caught / len(mutants):.1%}" if mutants else "-"
    return [name, len(mutants), caught, len(survived) - explained, explained, no_tests, share]


def report(mutants: list, explanations: list, seconds, areas=None) -> int:
    """Print the score, the table and every mutant not caught; the exit status."""
    header = ["", "mutants", "caught", "unexplained", "explained", "(no tests)", "caught %"]
    rows = [header] + [_row(area, [m for m in mutants if m.area == area]) for area in SELECTION
                       if not areas or area in areas]
    rows.append(_row("all", mutants))
    by_file = [header] + [_row(path, [m for m in mutants if m.path == path])
                          for path in sorted({m.path for m in mutants})]
    print("\nmutation testing (mutmut): caught = killed, timed out or crashed; explained survivors count as not caught")
    print(_table(rows) + "\n\n" + _table(by_file) + "\n")
    survivors = sorted((m for m in mutants if not m.caught), key=lambda m: (m.path, m.function, m.name))
    for mutant in survivors:
        change = "; ".join([f"- {line}" for line in mutant.removed] + [f"+ {line}" for line in mutant.added])
        verdict = f"explained: {mutant.explained}" if mutant.explained else "NOT EXPLAINED"
        print(f"{mutant.status:>9}  {mutant.path} {mutant.function}  [{mutant.name.rpartition('__')[2]}]\n"
              f"           {change}\n           {verdict}")
    unused = [e for e in explanations if not e.used and (not areas or area_of(e.path, e.function) in areas)]
    for explanation in unused:
        print(f"note: {EQUIVALENTS.name}:{explanation.line} ({explanation.path} {explanation.function}) matches no "
              f"surviving mutant now (caught, or the code changed): delete it or key it to the new line")
    return _verdict(mutants, seconds, areas)


def _verdict(mutants: list, seconds, areas=None) -> int:
    missing = [entry for area, entries in SELECTION.items() for entry in entries if (not areas or area in areas)
               and not any(m.area is not None and _entry_has(entry, m) for m in mutants)]
    for entry in missing:
        print(f"FAILED: the selection names {entry}, which has no mutant: the code moved or was renamed; "
              f"update SELECTION in tools/mutation.py")
    unchecked = [m for m in mutants if m.status == "not checked"]
    if unchecked:
        print(f"FAILED: {len(unchecked)} mutants were not checked (the run was stopped?)")
    caught = sum(m.caught for m in mutants)
    score = caught / len(mutants) if mutants else 0.0
    took = f" in {seconds / 60:.1f} min" if seconds is not None else ""
    print(f"\nscore: {caught} of {len(mutants)} mutants caught ({score:.1%}){took}; "
          f"{sum(bool(m.explained) for m in mutants)} survivors explained as equivalent, "
          f"{sum(not m.caught and not m.explained for m in mutants)} not explained")
    if score < THRESHOLD:
        print(f"FAILED: under {THRESHOLD:.0%} caught")
    return 0 if score >= THRESHOLD and not missing and not unchecked and mutants else 1


def _entry_has(entry: str, mutant: Mutant) -> bool:
    pattern, _, function = entry.partition(":")
    return fnmatch.fnmatch(mutant.path, pattern) and (not function or function == mutant.function)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, required=True, help="the folder mutmut runs in (made afresh)")
    parser.add_argument("--report-only", action="store_true", help="report the last run in --workdir")
    parser.add_argument("--jobs", type=int, default=None, help="mutants tested at once (mutmut: one per core)")
    parser.add_argument("--area", action="append", choices=list(SELECTION), default=None,
                        help="mutate this area only (repeat for several; default: all); the score is of those")
    options = parser.parse_args(argv)
    workdir = options.workdir.resolve()
    seconds = None
    if not options.report_only:
        began = time.monotonic()
        prepare(workdir)
        status = run_mutmut(workdir, mutant_globs(options.area), options.jobs)
        seconds = time.monotonic() - began
        if status != 0:
            print(f"FAILED: mutmut ended with exit status {status} ({workdir / 'mutmut.log'})")
            return 1
    mutants = [m for m in collect(workdir) if not options.area or m.area in options.area]
    read_changes(workdir, [m for m in mutants if not m.caught])
    explanations = read_explanations()
    explain(mutants, explanations)
    return report(mutants, explanations, seconds, options.area)


if __name__ == "__main__":
    sys.exit(main())

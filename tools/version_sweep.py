"""Sweep every minor release in devshim's declared ranges, one fresh virtual environment at a time.

The tox envs test each range's ends (the floors in pyproject.toml, the newest releases tox.ini
pins). This tool tests what lies between: for each framework it lists the releases on the package
index between the declared floor and the newest pinned release, keeps the latest patch of each
minor release (and the floor itself), and for each one

1. makes a fresh venv (Python 3.11 where the release installs on it, else the next newer Python),
2. installs the release, pinned, with devshim (this checkout at HEAD, exported by ``git archive``
   so edits made while the sweep runs do not leak in) and its test extra,
3. runs ``python -m devshim info``, then the conformance suite and devshim's tests of that
   framework, plain and, where the backend has virtual devices, again on virtual devices (a
   release outside the virtual devices' range is recorded as refused, when devshim refuses it by
   name),
4. records the counts in a JSON results file, deletes the venv, and rewrites the table between
   the sweep markers in docs/supported-versions.md.

A release already in the results file is not run again (the sweep resumes where it stopped),
unless asked (``--redo``, ``--redo-failed``, ``--stale``). One venv at a time: a CUDA build of
torch takes about 5.5 GB, and the pip cache (the sweep's own) is emptied when it passes
``--cache-limit-gb``. ``--lanes N`` runs N sweeps side by side instead, each in its own folder
with its own venv and cache, the releases shared out by the seconds each took when last
recorded; their results are merged into the results file as each lane ends.

    python tools/version_sweep.py --list                      # what the sweep would run
    python tools/version_sweep.py                             # all of it, resuming
    python tools/version_sweep.py --framework jax             # one framework
    python tools/version_sweep.py --release torch==2.7.1      # one release (run again if recorded)
    python tools/version_sweep.py --stale                     # rerun rows tested on other devshim/ code
    python tools/version_sweep.py --stale --lanes 6           # the same, six releases at a time
    python tools/version_sweep.py --rotate --budget 240       # the rotating part (tox -e sweep-part): releases tox does not pin
    python tools/version_sweep.py --table                     # rewrite the docs table only

Needs git, the ``packaging`` library and the Pythons 3.9 to 3.13 (python3.X on PATH, or pyenv's).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "tools") not in sys.path:
    sys.path.insert(0, str(ROOT / "tools"))

from tox_facts import virtual_devices  # noqa: E402 - tox.ini's count of each backend's virtual GPUs

RESULTS = ROOT / "tools" / "version_sweep_results.json"
DOC = ROOT / "docs" / "supported-versions.md"
START, END = "<!-- version sweep: start -->", "<!-- version sweep: end -->"
# The interpreters tried for a framework release, in order: CI's default first.
PYTHONS = ("3.11", "3.12", "3.13", "3.10", "3.9")
CONFORMANCE = "tests/devshim_conformance"
INTERNALS = "tests/test_internals.py"  # the canaries of the private names each backend uses
SWEEP_RECORD_TESTS = "tests/test_version_sweep.py"
INSTALL_TIMEOUT, TEST_TIMEOUT = 1800, 2700


@dataclass(frozen=True)
class Framework:
    """One declared range: the package swept, how devshim is installed and tested over it."""

    name: str                    # the results' and the table's name
    title: str
    package: str                 # the distribution pinned at each release
    backend: str                 # DEVSHIM_BACKEND
    extra: str                   # devshim's extra installed with it ("" for none)
    tests: tuple                 # test paths beside the conformance suite, plain pass
    virtual: int = 0             # virtual devices for the second pass (0: none): its tox env's count
    virtual_tests: tuple = ()    # test paths beside the conformance suite, virtual pass
    whole_suite: bool = False    # run every test (the numpy backend's whole suite is short)


# The tests every framework's release runs beside the conformance suite: the capabilities whose
# code meets each framework (GPU memory, the gradient checks, Chainer's cases) and the canaries of
# the private names each backend uses.
SHARED = ("tests/test_memory.py", "tests/test_testing_functions.py", "tests/test_chainer_gradient_check.py", INTERNALS)

FRAMEWORKS = {
    "torch": Framework("torch", "PyTorch", "torch", "torch", "torch",
                       ("tests/test_torch.py", "tests/test_distributed.py", *SHARED), virtual=virtual_devices("torch"),
                       virtual_tests=("tests/test_torch.py", "tests/test_torch_virtual.py", *SHARED)),
    "jax": Framework("jax", "JAX", "jax", "jax", "jax", ("tests/test_jax.py", "tests/test_jax_guard.py", *SHARED),
                     virtual=virtual_devices("jax"),
                     virtual_tests=("tests/test_jax.py", "tests/test_jax_guard.py", *SHARED)),
    "tensorflow": Framework("tensorflow", "TensorFlow", "tensorflow-cpu", "tensorflow", "tensorflow-cpu",
                            ("tests/test_tensorflow.py", "tests/test_keras.py", *SHARED),
                            virtual=virtual_devices("tensorflow"),
                            virtual_tests=("tests/test_tensorflow.py", "tests/test_keras.py", *SHARED)),
    "numpy": Framework("numpy", "numpy", "numpy", "numpy", "", (), whole_suite=True),
    "python": Framework("python", "Python", "python", "numpy", "", (), whole_suite=True),
}


@dataclass
class Release:
    """One release to test: ``framework`` at ``version`` (for "python", the interpreter's)."""

    framework: Framework
    version: str
    pythons: tuple = PYTHONS
    outcome: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.framework.name}=={self.version}"


# ------------------------------------------------------------------ the declared ranges


def declared_ranges() -> dict:
    """{framework: (floor, newest)}: floors from pyproject.toml, the newest from tox.ini's pins."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    tox = (ROOT / "tox.ini").read_text()

    def floor(requirement: str) -> str:
        found = re.search(rf'"{re.escape(requirement)}>=([0-9][0-9.]*)"', pyproject)
        if not found:
            raise SystemExit(f"pyproject.toml declares no floor for {requirement}")
        return found.group(1)

    def newest(package: str) -> str:
        pins = re.findall(rf"^\s*{re.escape(package)}==([0-9][0-9.]*)\s*$", tox, re.MULTILINE)
        if not pins:
            raise SystemExit(f"tox.ini pins no {package}")
        return str(max(Version(pin) for pin in pins))

    python_floor = re.search(r'requires-python = ">=([0-9.]+)"', pyproject).group(1)
    python_newest = max(re.findall(r"basepython = python([0-9.]+)", tox), key=Version)
    return {
        "torch": (floor("torch"), newest("torch")),
        "jax": (floor("jax"), newest("jax")),
        "tensorflow": (floor("tensorflow-cpu"), newest("tensorflow-cpu")),
        "numpy": (floor("numpy"), newest("numpy")),
        "python": (python_floor, python_newest),
    }


def index_versions(package: str) -> set:
    """Every release of ``package`` the package index offers to Python 3.11 or to Python 3.13
    (JAX 0.11 and numpy 2.5 need Python 3.12 or later; numpy 1.23 has no 3.13 wheel)."""
    found: set = set()
    for extra in ([], ["--python-version", "3.13", "--only-binary=:all:"]):
        run = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package, *extra],
                             capture_output=True, text=True, timeout=300)
        listed = re.search(r"Available versions: (.*)", run.stdout)
        if listed:
            found.update(v.strip() for v in listed.group(1).split(","))
    if not found:
        raise SystemExit(f"the package index lists no release of {package}")
    return found


def minor_releases(versions, floor: str, newest: str) -> list:
    """The latest patch of each minor release between ``floor`` and ``newest``, and the floor.

    >>> minor_releases(["0.4.30", "0.4.31", "0.4.38", "0.5.3", "0.5.2", "0.6.0rc1"], "0.4.31", "0.5.3")
    ['0.4.31', '0.4.38', '0.5.3']
    """
    low, high = Version(floor), Version(newest)
    latest: dict = {}
    for text in versions:
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if version.is_prerelease or version.is_devrelease or version.local or not low <= version <= high:
            continue
        minor = version.release[:2]
        if minor not in latest or version > latest[minor]:
            latest[minor] = version
    chosen = set(latest.values()) | {low}
    return [str(v) for v in sorted(chosen)]


def releases_to_sweep(names) -> list:
    """The releases of the frameworks ``names``, oldest first within each."""
    ranges = declared_ranges()
    releases = []
    for name in names:
        framework = FRAMEWORKS[name]
        floor, newest = ranges[name]
        if name == "python":
            for version in minor_releases(_python_minors(), floor, newest):
                releases.append(Release(framework, version, pythons=(version,)))
            continue
        for version in minor_releases(index_versions(framework.package), floor, newest):
            releases.append(Release(framework, version))
    return releases


def _python_minors() -> list:
    return [f"3.{minor}" for minor in range(6, 20) if find_python(f"3.{minor}")]


# ------------------------------------------------------------------ one release


def find_python(minor: str):
    """The interpreter for Python ``minor`` ("3.9"): python3.9 on PATH, else pyenv's newest 3.9.x."""
    found = shutil.which(f"python{minor}")
    if found and subprocess.run([found, "-c", ""], capture_output=True).returncode == 0:
        return found
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = sorted(root.glob(f"{minor}.*/bin/python{minor}"),
                        key=lambda p: Version(p.parent.parent.name) if p.parent.parent.name[-1].isdigit()
                        else Version("0"))
    return str(candidates[-1]) if candidates else None


def requirements(release: Release, source: Path) -> list:
    """What pip installs for ``release``: the release pinned, devshim with its extras."""
    framework = release.framework
    extras = ",".join(filter(None, [framework.extra, "test"]))
    pinned = [] if framework.name == "python" else [f"{framework.package}=={release.version}"]
    return [*pinned, f"{source}[{extras}]"]


def make_venv(release: Release, workdir: Path, source: Path, cache: Path):
    """A venv with ``release`` installed, trying each of its Pythons in turn: (path, python, log),
    path None when it installs on none of them."""
    log = []
    for minor in release.pythons:
        python = find_python(minor)
        if python is None:
            log.append(f"Python {minor}: not found")
            continue
        venv = workdir / "venv"
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        constraints = workdir / "constraints.txt"
        pinned = [r for r in requirements(release, source) if "==" in r]
        constraints.write_text("".join(f"{r}\n" for r in pinned))
        install = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--cache-dir", str(cache),
             "-c", str(constraints), *requirements(release, source)],
            capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
        if install.returncode == 0:
            return venv, minor, log
        tail = [line for line in install.stderr.splitlines() if "ERROR" in line][-2:]
        log.append(f"Python {minor}: " + (" / ".join(tail) or install.stderr[-300:]))
        if not any(mark in install.stderr for mark in ("No matching distribution", "ResolutionImpossible",
                                                       "Could not find a version", "requires a different Python")):
            break  # not a question of the interpreter: another Python would fail the same way
    shutil.rmtree(workdir / "venv", ignore_errors=True)
    return None, None, log


def installed_versions(venv: Path) -> dict:
    code = ("import importlib.metadata as m, json, platform\n"
            "out = {'python': platform.python_version()}\n"
            "for name in ('torch', 'jax', 'jaxlib', 'tensorflow-cpu', 'numpy', 'keras', 'ml_dtypes'):\n"
            "    try: out[name] = m.version(name)\n"
            "    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(out))")
    run = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True)
    return json.loads(run.stdout) if run.returncode == 0 else {}


def run_pytest(venv: Path, source: Path, paths, env: dict, report: Path) -> dict:
    """One pytest pass; its counts from the JUnit report: passed, failed, skipped, the first
    failures' ids, the seconds it took, and pytest's exit status."""
    started = time.monotonic()
    try:
        run = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              f"--junitxml={report}", *paths],
                             cwd=source, env=env, capture_output=True, text=True, timeout=TEST_TIMEOUT)
        status, tail = run.returncode, run.stdout[-2000:] + run.stderr[-2000:]
        stopped = stopped_tests(run.stderr)
    except subprocess.TimeoutExpired:
        status, tail, stopped = "timeout", f"pytest ran past {TEST_TIMEOUT} s", []
    counts = {"passed": 0, "failed": 0, "skipped": 0, "failures": [], "exit": status,
              "seconds": round(time.monotonic() - started)}
    if report.exists():
        for case in ElementTree.parse(report).getroot().iter("testcase"):
            failure = case.find("failure")
            failure = failure if failure is not None else case.find("error")
            if failure is not None:
                counts["failed"] += 1
                message = (failure.get("message") or "").strip().splitlines()[:1]
                counts["failures"].append(f"{case.get('classname')}::{case.get('name')}"
                                          + (f": {message[0][:240]}" if message else ""))
            elif case.find("skipped") is not None:
                counts["skipped"] += 1
            else:
                counts["passed"] += 1
        report.unlink()
    if status not in (0, 1) or (status == 1 and not counts["failed"]):
        if stopped:  # the suite's hung-test watchdog (tests/conftest.py) dumped every stack and ended it
            counts["failures"].append(f"pytest exit {status}: the hung-test watchdog stopped it in "
                                      + ", ".join(stopped))
        else:
            counts["failures"].append(f"pytest exit {status}: " + tail.strip().splitlines()[-1:][0][:300]
                                      if tail.strip() else f"pytest exit {status}")
        counts["failed"] = max(counts["failed"], 1)
    counts["failures"] = counts["failures"][:8]
    return counts


def stopped_tests(stderr: str) -> list:
    """The tests in the stacks the suite's hung-test watchdog dumps (faulthandler: "Timeout" and
    every thread's frames, most recent first) before it ends a run: each test's file, line and
    name, once. Empty when the run was not ended so.

    >>> stopped_tests('Timeout (0:05:00)!\\nThread 0x1 (most recent call first):\\n'
    ...               '  File "/s/x/tests/test_readme.py", line 40 in run\\n'
    ...               '  File "/s/x/tests/test_readme.py", line 88 in test_the_bench_runs\\n')
    ['tests/test_readme.py:88 test_the_bench_runs']
    """
    if "Timeout (" not in stderr:
        return []
    dump = stderr[stderr.index("Timeout ("):]
    found = re.findall(r'File "[^"]*?(tests/[\w/]*test_\w+\.py)", line (\d+) in (test_\w+)', dump)
    return list(dict.fromkeys(f"{path}:{line} {name}" for path, line, name in found))


def test_env(release: Release, virtual: int = 0) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEVSHIM_", "PIP_CONSTRAINT", "VIRTUAL_ENV"))}
    env.update(DEVSHIM_BACKEND=release.framework.backend, PYTHONHASHSEED="0", TF_CPP_MIN_LOG_LEVEL="2")
    if virtual:
        env["DEVSHIM_VIRTUAL_DEVICES"] = str(virtual)
    return env


def virtual_refusal(venv: Path, source: Path, release: Release):
    """devshim's refusal of virtual devices on this release (its first line), or None when it
    presents them."""
    code = "import devshim as ds; ds.num_gpus(); ds.try_all_gpus()"
    run = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=source, capture_output=True, text=True,
                         env=test_env(release, release.framework.virtual), timeout=600)
    if run.returncode == 0:
        return None
    last = (run.stderr.strip().splitlines() or ["(no message)"])[-1]
    return last if "devshim.errors.BackendError" in last else f"ERROR {last}"


def test_release(release: Release, venv: Path, source: Path, workdir: Path) -> dict:
    """Run ``devshim info``, the plain pass and the virtual pass; return the outcome's parts."""
    framework = release.framework
    info = subprocess.run([str(venv / "bin" / "python"), "-m", "devshim", "info"], cwd=source,
                          env=test_env(release), capture_output=True, text=True, timeout=600)
    # The whole suite but the sweep's own record (its tests check this file and the docs table,
    # which a sweep in progress is still writing: they say nothing of a release).
    paths = ["tests", "--ignore", SWEEP_RECORD_TESTS] if framework.whole_suite else [CONFORMANCE, *framework.tests]
    outcome = {"info_exit": info.returncode,
               "plain": run_pytest(venv, source, paths, test_env(release), workdir / "plain.xml")}
    if framework.virtual:
        refused = virtual_refusal(venv, source, release)
        if refused is None:
            outcome["virtual"] = run_pytest(venv, source, [CONFORMANCE, *framework.virtual_tests],
                                            test_env(release, framework.virtual), workdir / "virtual.xml")
        else:
            outcome["virtual"] = {"refused": refused}
    return outcome


def sweep_one(release: Release, workdir: Path, source: Path, cache: Path, described: dict) -> dict:
    started = time.monotonic()
    venv, python, log = make_venv(release, workdir, source, cache)
    outcome = {"framework": release.framework.name, "release": release.version, **described,
               "date": datetime.date.today().isoformat(), "machine": machine(), "install_log": log}
    try:
        if venv is None:
            outcome.update(result="not installable", python=None)
        else:
            outcome.update(python=python, versions=installed_versions(venv))
            outcome.update(test_release(release, venv, source, workdir))
            outcome["result"] = verdict(outcome)
    finally:
        shutil.rmtree(workdir / "venv", ignore_errors=True)
    outcome["seconds"] = round(time.monotonic() - started)
    return outcome


def verdict(outcome: dict) -> str:
    passes = [outcome["plain"], outcome.get("virtual", {})]
    if outcome.get("info_exit"):
        return "failed"
    if any(p.get("failed") for p in passes) or str(outcome.get("virtual", {}).get("refused", "")).startswith("ERROR"):
        return "failed"
    return "passed"


def machine() -> str:
    """The machine a row ran on, in words: "Linux x86_64, 2 CPU cores, 24 GiB, no GPU"."""
    memory = ""
    try:
        pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        memory = f", {round(pages * page / 2**30)} GiB"
    except (ValueError, OSError, AttributeError):
        pass
    gpus = []
    if shutil.which("nvidia-smi"):
        listed = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                capture_output=True, text=True)
        gpus = [line.strip() for line in listed.stdout.splitlines() if line.strip()] if listed.returncode == 0 else []
    gpu = f"{len(gpus)} x {gpus[0]}" if gpus else "no GPU"
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores{memory}, {gpu}"


def described_code(root: Path = ROOT) -> dict:
    """What a row describes: HEAD's short commit and the git tree of its ``devshim/`` folder (the
    code a release sees; a commit that leaves ``devshim/`` alone leaves the rows current)."""
    def git(*args) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()

    return {"commit": git("rev-parse", "--short=10", "HEAD"), "devshim_tree": git("rev-parse", "HEAD:devshim")}


# ------------------------------------------------------------------ results and the table


def load_results(path: Path | None = None) -> dict:
    path = path or RESULTS
    return json.loads(path.read_text()) if path.exists() else {}


def save_results(results: dict, path: Path | None = None) -> None:
    ordered = dict(sorted(results.items(), key=lambda kv: (list(FRAMEWORKS).index(kv[1]["framework"]),
                                                            Version(kv[1]["release"]))))
    (path or RESULTS).write_text(json.dumps(ordered, indent=1) + "\n")


def _counts(part) -> str:
    if not part:
        return "(none)"
    if "refused" in part:
        return "refused by name" if not part["refused"].startswith("ERROR") else "ERROR"
    return f"{part['passed']} / {part['failed']} / {part['skipped']}"


def described_by(results: dict) -> str:
    """The sentence above the table: the code and machine its rows describe."""
    if not results:
        return "No release has been swept yet."
    commits = sorted({row["commit"] for row in results.values()})
    trees = {row.get("devshim_tree") for row in results.values()}
    machines = sorted({row.get("machine") or "a machine not recorded" for row in results.values()})
    dates = sorted(row["date"] for row in results.values())
    when = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    if len(trees) == 1 and None not in trees:
        code = (f"devshim at commit `{commits[-1]}`" if len(commits) == 1 else
                f"one state of devshim's code (`devshim/` tree `{next(iter(trees))[:10]}`), run from commits "
                + ", ".join(f"`{c}`" for c in commits))
    else:
        code = "several states of devshim's code (commits " + ", ".join(f"`{c}`" for c in commits) + ")"
    seconds = sum(row.get("seconds") or 0 for row in results.values())
    return (f"Every row below describes {code}, swept {when} on {'; '.join(machines)} "
            f"({len(results)} releases, {seconds} s of runs in all).")


def table(results: dict) -> str:
    """The docs table: the sentence saying what it describes, then one row per release, grouped by
    framework."""
    lines = [described_by(results)]
    for name, framework in FRAMEWORKS.items():
        rows = [r for r in results.values() if r["framework"] == name]
        if not rows:
            continue
        rows.sort(key=lambda r: Version(r["release"]))
        lines += ["", f"**{framework.title}**", "",
                  "| release | Python | plain: passed / failed / skipped | virtual devices: passed / failed / skipped "
                  "| result | date | commit |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for row in rows:
            virtual = _counts(row.get("virtual")) if FRAMEWORKS[name].virtual else "(the backend has none)"
            python = (row.get("versions") or {}).get("python", row.get("python") or "-")
            lines.append(f"| {row['release']} | {python} | {_counts(row.get('plain'))} | {virtual} "
                         f"| {row['result']} | {row['date']} | `{row['commit']}` |")
    return "\n".join(lines + _failure_notes(results)).strip("\n")


def _failure_notes(results: dict) -> list:
    """A line per release that did not pass: what failed (the first few tests, with their errors)."""
    notes = []
    for row in results.values():
        if row["result"] == "passed":
            continue
        parts = [f"plain: {'; '.join(row['plain']['failures'])}" if row.get("plain", {}).get("failures") else "",
                 f"virtual: {'; '.join(row['virtual']['failures'])}" if row.get("virtual", {}).get("failures")
                 else "", f"virtual: {row['virtual']['refused']}" if "refused" in row.get("virtual", {}) and
                 row["virtual"]["refused"].startswith("ERROR") else "",
                 f"install: {'; '.join(row['install_log'])}" if row["result"] == "not installable" else "",
                 "`devshim info` failed" if row.get("info_exit") else ""]
        text = " ".join(part for part in parts if part).replace("|", "\\|")
        notes.append(f"- {FRAMEWORKS[row['framework']].title} {row['release']} ({row['date']}, at "
                     f"{row['commit']}): {text}")
    return ["", "Releases that did not pass, with the first of what failed:", "", *notes] if notes else []


def write_table(results: dict) -> None:
    text = DOC.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{DOC} has no {START} ... {END} markers to write the table between")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{START}\n{table(results)}\n{END}{tail}")


# ------------------------------------------------------------------ the command line


def export_source(workdir: Path) -> tuple:
    """HEAD of this checkout, exported into ``workdir``: (folder, what it describes: `described_code`)."""
    described = described_code()
    source = workdir / f"devshim-{described['commit']}"
    if not source.exists():
        source.mkdir(parents=True)
        archive = subprocess.Popen(["git", "archive", "HEAD"], cwd=ROOT, stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(source)], stdin=archive.stdout, check=True)
        archive.wait()
    return source, described


def due(release: Release, results: dict, args, described: dict) -> bool:
    recorded = results.get(release.key)
    if args.release or recorded is None or args.redo:
        return True
    if args.redo_failed and recorded["result"] != "passed":
        return True
    return bool(args.stale and recorded.get("devshim_tree") != described["devshim_tree"])


def trim_cache(cache: Path, limit_gb: float) -> None:
    size = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) if cache.exists() else 0
    if size > limit_gb * 2**30:
        shutil.rmtree(cache, ignore_errors=True)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", action="append", choices=list(FRAMEWORKS),
                        help="sweep this framework's range (repeat for several; default: all)")
    parser.add_argument("--release", action="append", metavar="NAME==VERSION",
                        help="test this release only, run again if recorded (torch==2.7.1, python==3.9)")
    parser.add_argument("--list", action="store_true", help="print the releases the sweep covers, then stop")
    parser.add_argument("--table", action="store_true", help="rewrite the docs table from the results, then stop")
    parser.add_argument("--redo", action="store_true", help="run recorded releases again")
    parser.add_argument("--redo-failed", action="store_true", help="run releases recorded as not passed again")
    parser.add_argument("--stale", action="store_true", help="run again the releases recorded on other code (another `devshim/` tree than HEAD's)")
    parser.add_argument("--rotate", action="store_true",
                        help="the rotating part (tox -e sweep-part): the releases tox does not pin, starting at HEAD's commit count "
                             "(modulo their number), until --budget is spent; reported, not recorded")
    parser.add_argument("--budget", type=float, default=240.0,
                        help="with --rotate: start no release after this many seconds (default 240)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "devshim-version-sweep")
    parser.add_argument("--cache-limit-gb", type=float, default=12.0,
                        help="empty the sweep's pip cache when it grows past this (default 12; with --lanes, "
                             "shared among the lanes)")
    parser.add_argument("--lanes", type=int, default=1,
                        help=f"run this many sweeps side by side, the releases shared out by their recorded seconds "
                             f"(default 1; more than {LANES_PER_CORE} per CPU core overloads the machine: a warning)")
    parser.add_argument("--results", type=Path, help=argparse.SUPPRESS)  # a lane's own results file
    return parser.parse_args(argv)


#: Lanes side by side per CPU core before the load alone fails timing-bound tests: on the
#: project's 2-core machine, with 10 a README test of the logging bench ran past the suite's
#: 300-second hung-test watchdog and a time-limit test read 9.75 s; with 6 started at once, one
#: release's tests ran past the watchdog while all six were installing (pip is CPU-heavy), and
#: none after. Lanes start `LANE_STAGGER` seconds apart, so that their first installs do not coincide.
LANES_PER_CORE = 3
LANE_STAGGER = 60.0


def lanes(releases: list, results: dict, count: int) -> list:
    """`releases` shared out among `count` lanes of about equal time: longest first, each to the
    lane with the fewest seconds so far, by the seconds each took when last recorded (the median
    of the recorded ones for a release never run).

    >>> jax = FRAMEWORKS["jax"]
    >>> done = {f"jax=={v}": {"seconds": s} for v, s in (("0.4.31", 100), ("0.5.3", 90), ("0.6.2", 50))}
    >>> [[r.version for r in lane] for lane in lanes([Release(jax, v) for v in ("0.4.31", "0.5.3", "0.6.2")], done, 2)]
    [['0.4.31'], ['0.5.3', '0.6.2']]
    """
    recorded = [row["seconds"] for row in results.values() if row.get("seconds")]
    typical = statistics.median(recorded) if recorded else 600

    def seconds(release: Release) -> float:
        return (results.get(release.key) or {}).get("seconds") or typical

    shared: list = [[] for _ in range(min(max(1, count), len(releases)))]
    load = [0.0] * len(shared)
    for release in sorted(releases, key=seconds, reverse=True):
        lane = load.index(min(load))
        shared[lane].append(release)
        load[lane] += seconds(release)
    return shared


def lane_command(release_keys: list, workdir: Path, results: Path, cache_limit_gb: float) -> list:
    """The command line of one lane: this tool, on `release_keys`, recording into its own file."""
    return [sys.executable, str(Path(__file__).resolve()), "--workdir", str(workdir), "--results", str(results),
            "--cache-limit-gb", str(cache_limit_gb), *(f"--release={key}" for key in release_keys)]


def run_lanes(args, releases: list, results: dict, stagger: float = LANE_STAGGER) -> int:
    """`releases` in `args.lanes` sweeps side by side (`lanes`), each a process of this tool with
    its own folder, venv, cache and log, started `stagger` seconds apart; each lane's results are
    merged into `results` (and the results file and the table) as soon as it ends. 0 when every
    release passed."""
    cores = os.cpu_count() or 1
    if args.lanes > LANES_PER_CORE * cores:
        print(f"sweep: warning: {args.lanes} lanes on {cores} CPU cores: more than {LANES_PER_CORE} a core, and "
              f"timing-bound tests may fail from the load alone (use --lanes {LANES_PER_CORE * cores} or fewer)",
              file=sys.stderr, flush=True)
    running = []
    for number, lane in enumerate(lanes(releases, results, args.lanes)):
        if number:
            time.sleep(stagger)
        workdir = args.workdir / f"lane{number}"
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "results.json").unlink(missing_ok=True)  # an earlier run's lane held other releases
        log = (workdir / "sweep.log").open("w")
        command = lane_command([r.key for r in lane], workdir, workdir / "results.json",
                               args.cache_limit_gb / args.lanes)
        running.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), workdir, log))
        print(f"sweep: lane {number}: {', '.join(r.key for r in lane)} (log: {workdir / 'sweep.log'})", flush=True)
    while running:
        ended = [lane for lane in running if lane[0].poll() is not None]
        for _, workdir, log in ended:
            log.close()
            found = load_results(workdir / "results.json")
            results.update(found)
            save_results(results)
            write_table(results)
            for key, row in found.items():
                print(f"sweep: {key} {_summary(row)}", flush=True)
        running = [lane for lane in running if lane not in ended]
        if running and not ended:
            time.sleep(1.0)
    return 0 if all((results.get(r.key) or {}).get("result") == "passed" for r in releases) else 1


def pinned_by_tox() -> set:
    """The releases tox.ini's envs pin, as result keys ("torch==2.13.0", "python==3.11"): CI tests
    those in its own envs every run."""
    tox = (ROOT / "tox.ini").read_text()
    pinned = {f"python=={minor}" for minor in re.findall(r"basepython = python([0-9.]+)", tox)}
    pinned.add(f"python=={sys.version_info[0]}.{sys.version_info[1]}")  # the envs without a basepython
    for framework in FRAMEWORKS.values():
        for version in re.findall(rf"^\s*{re.escape(framework.package)}==([0-9][0-9.]*)\s*$", tox, re.MULTILINE):
            pinned.add(f"{framework.name}=={version}")
    return pinned


def rotation(releases: list, pinned: set, turn: int) -> list:
    """The releases tox does not pin, in sweep order, starting at ``turn`` (modulo their number).

    >>> names = [Release(FRAMEWORKS["jax"], v) for v in ("0.4.31", "0.4.38", "0.5.3", "0.6.2")]
    >>> [r.version for r in rotation(names, {"jax==0.4.31"}, 4)]
    ['0.5.3', '0.6.2', '0.4.38']
    """
    unpinned = [r for r in releases if r.key not in pinned]
    if not unpinned:
        return []
    start = turn % len(unpinned)
    return unpinned[start:] + unpinned[:start]


def commit_count() -> int:
    """How many commits HEAD has: CI's turn in the rotation (each commit on main moves it on)."""
    counted = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return int(counted.stdout.strip() or 0) if counted.returncode == 0 else 0


def selected_releases(args) -> list:
    """The releases this run covers, from ``--framework``, ``--release`` and ``--rotate``."""
    wanted = {r.split("==")[0] for r in args.release or ()}
    releases = releases_to_sweep(args.framework or sorted(wanted, key=list(FRAMEWORKS).index) or list(FRAMEWORKS))
    if args.release:
        releases = [r for r in releases if r.key in args.release] + [
            Release(FRAMEWORKS[k.split("==")[0]], k.split("==")[1],
                    pythons=(k.split("==")[1],) if k.startswith("python==") else PYTHONS)
            for k in args.release if k not in {r.key for r in releases}]
    if args.rotate:
        releases = rotation(releases, pinned_by_tox(), commit_count())
    return releases


def _summary(outcome: dict) -> str:
    return (f"{outcome['result']} in {outcome['seconds']} s (plain {_counts(outcome.get('plain'))}, "
            f"virtual {_counts(outcome.get('virtual'))})")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.table:
        write_table(load_results())
        return 0
    releases = selected_releases(args)
    if args.list:
        print("\n".join(r.key for r in releases))
        return 0
    args.workdir.mkdir(parents=True, exist_ok=True)
    source, described = export_source(args.workdir)
    results = {} if args.rotate else load_results(args.results)
    if args.lanes > 1 and not args.rotate:
        return run_lanes(args, [r for r in releases if due(r, results, args, described)], results)
    started = time.monotonic()
    for release in releases:
        if args.rotate and results and time.monotonic() - started > args.budget:
            print(f"sweep: {args.budget} s spent; the next CI run starts the rotation further on", flush=True)
            break
        if not args.rotate and not due(release, results, args, described):
            continue
        print(f"sweep: {release.key} ...", flush=True)
        results[release.key] = sweep_one(release, args.workdir, source, args.workdir / "pip-cache", described)
        if not args.rotate:  # CI's rotating part reports; the results file records full sweeps
            save_results(results, args.results)
            if args.results is None:  # a lane's results are written out by the sweep that runs it
                write_table(results)
        print(f"sweep: {release.key} {_summary(results[release.key])}", flush=True)
        for failure in (results[release.key].get("plain") or {}).get("failures", []) + (
                results[release.key].get("virtual") or {}).get("failures", []):
            print(f"  {failure}", flush=True)
        trim_cache(args.workdir / "pip-cache", args.cache_limit_gb)
    return 0 if all(results[r.key]["result"] == "passed" for r in releases if r.key in results) else 1


if __name__ == "__main__":
    sys.exit(main())

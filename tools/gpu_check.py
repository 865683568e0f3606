"""The project's check on a machine with a real GPU, in one run: the test suite per installed
backend (plain, and on virtual GPUs beside the real ones), `devshim selftest`, every
`devshim bench` experiment, and one summary.

For a machine whose Python already holds the frameworks (a lab or cloud GPU image) and that may
have no network. Nothing is installed into that Python: it runs this checkout through
``PYTHONPATH``, beside a temporary folder that registers devshim's pytest plugin and command as
an editable install would (no dependency is installed, no build backend runs). Packages the suite needs that the image lacks are named, with how to bring
them as wheels (``--wheels``).

    python tools/gpu_check.py --out gpu-check --time-limit 900
    python tools/gpu_check.py --backends torch --no-virtual --no-bench

The summary (``summary.md`` in ``--out``, also printed) gives, per suite pass, the counts of
passed, failed and skipped tests and each failure's first line; the selftest verdict; each
bench experiment's table. It is rewritten as each stage ends, so a check stopped from outside
keeps what it found. The full logs lie beside it: ``suites.log``, ``selftest.txt``,
``bench.txt``, and every test's outcome and seconds in ``outcomes-<backend>-<virtual GPUs>.jsonl``. Exit status 0 when every pass ran without a failure and the selftest passed.
docs/contributing.md explains how to run it and what to do with its results.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import importlib.metadata
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FRAMEWORKS = ("torch", "tensorflow", "jax", "mxnet", "cupy", "numpy")
#: Virtual GPUs per backend in the second pass, as tox.ini's envs ask for them.
VIRTUAL = {"torch": 2, "tensorflow": 2, "mxnet": 2, "jax": 4}
#: What the virtual pass runs beside the real GPUs (--full-virtual: everything): the contract, and
#: what virtual GPUs beside real ones can break (waiting, timing, defaults, the guard).
VIRTUAL_TESTS = ("tests/devshim_conformance", "tests/test_virtual_devices.py", "tests/test_timing.py",
                 "tests/test_torch_virtual.py", "tests/test_jax.py", "tests/test_jax_guard.py",
                 "tests/test_tensorflow.py", "tests/test_mxnet.py", "tests/test_examples.py")
#: The test files of one framework: a backend's pass leaves the other frameworks' files to their
#: own passes, as each tox env holds one framework (the conformance suite runs on every installed
#: backend in every pass, through its harnesses).
OWN_FILES = {
    "torch": ("test_torch*.py", "test_d2l_torch_chapters.py", "test_distributed.py"),
    "tensorflow": ("test_tensorflow.py", "test_d2l_tensorflow_chapters.py"),
    "jax": ("test_jax*.py", "test_d2l_jax_chapters.py"),
    "mxnet": ("test_mxnet.py",),
    "cupy": ("test_cupy.py",),
}
#: What the suite imports besides the frameworks: (module, distribution, needed by).
SUITE_NEEDS = (
    ("pytest", "pytest", "the suite"),
    ("hypothesis", "hypothesis", "the suite"),
    ("array_api_compat", "array-api-compat==1.16.0", "ds.array_module on torch (torch's ops, the selftest)"),
    ("expecttest", "expecttest==0.3.0", "torch's device-generic tests on virtual GPUs"),
)
OPTIONAL = (
    ("xdist", "pytest-xdist", "running each pass on several cores (else one process per pass)"),
    ("matplotlib", "matplotlib", "the bench plots' tests"),
    ("tqdm", "tqdm", "progress bars (plain lines without)"),
)

#: How much test time one plain pass needs, relative to the others, where the passes are one run
#: (tests/conftest.py's DEVSHIM_TEST_PASSES): seconds of test calls on the H200 of 2026-11-27
#: (torch 2.11, JAX 0.11.2, CuPy 14.2), per pass, once each test runs in one pass alone. Passes
#: that run at once share the xdist workers in these proportions, so that they end together.
PASS_WEIGHT = {"torch": 1.7, "jax": 1.0, "cupy": 0.65, "numpy": 1.0}

# Every process the check starts runs with these. JAX takes 75% of a GPU's memory at its first
# array unless told otherwise, TensorFlow all of it: several test processes share the GPU here, so
# each takes what it uses. (_checkout_in_use adds PYTHONPATH.)
SHARED_GPU = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_FORCE_GPU_ALLOW_GROWTH": "true",
              "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}


def main(argv=None) -> int:
    args = _arguments(argv)
    started = time.monotonic()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    summary = Summary(out / "summary.md", started, args.time_limit)
    summary += [f"# devshim GPU check ({time.strftime('%Y-%m-%d %H:%M')})", "", *_machine()]
    missing = _missing(summary, args.wheels)
    if missing and not args.wheels:
        summary += _how_to_bring(missing)
        return _finish(out, summary, ok=False)
    with tempfile.TemporaryDirectory(prefix="devshim-gpu-check-") as scratch:
        SHARED_GPU.update(_checkout_in_use(Path(scratch), args.wheels))
        python = sys.executable
        backends = [name for name in (args.backends or FRAMEWORKS) if _installed(name)]
        ok = _suites(python, backends, args, out, summary)
        ok = _selftest(python, backends, out, summary) and ok
        _extras(python, out, summary)  # (before the bench, which takes whatever time is left)
        if not args.no_bench:
            _bench(python, out, summary, args.bench_time)
    summary.append(f"\ntotal: {time.monotonic() - started:.0f} s")
    return _finish(out, summary, ok)


class Summary(list):
    """The summary's lines, written to `path` whenever a stage adds to it: a check stopped from
    outside (a lent machine's time running out) leaves what it had found."""

    def __init__(self, path: Path, started: float, limit: int):
        super().__init__()
        self.path, self.started, self.limit = path, started, limit

    def __iadd__(self, lines):
        self.extend(lines)
        self.save()
        return self

    def append(self, line) -> None:
        super().append(line)
        self.save()

    def save(self) -> None:
        self.path.write_text("\n".join(self) + "\n")

    def left(self, wanted: float) -> float:
        """Seconds a stage that wants `wanted` may take: all of it without a time limit."""
        if not self.limit:
            return wanted
        return max(0.0, min(wanted, self.limit - (time.monotonic() - self.started)))


def _run(command: list, seconds: float, **options) -> tuple:
    """`(returncode or None if stopped, output)` of `command`, stopped with everything it started
    (pytest-xdist's workers hold its pipes open) after `seconds`."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True, **options)
    try:
        output, _ = process.communicate(timeout=max(seconds, 1))
        return process.returncode, output
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return None, f"{output}\nSTOPPED after {seconds:.0f} s"


def _arguments(argv):
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", default="gpu-check", help="folder for the summary and the logs")
    parser.add_argument("--backends", nargs="+", choices=FRAMEWORKS, help="default: every installed one")
    parser.add_argument("--no-virtual", action="store_true", help="no second pass on virtual GPUs")
    parser.add_argument("--full-virtual", action="store_true", help="the whole suite in the virtual passes too")
    parser.add_argument("--no-bench", action="store_true", help="no devshim bench experiments")
    parser.add_argument("--wheels", help="a folder of wheels for what the image lacks (pip download ...)")
    parser.add_argument("--workers", type=int, default=0,
                        help="pytest-xdist workers in all (default: one per CPU; many tests wait on interpreters)")
    parser.add_argument("--parallel", type=int, default=6, help="suite passes run at once")
    parser.add_argument("--pass-time", type=int, default=270, help="seconds one suite pass may take")
    parser.add_argument("--bench-time", type=int, default=60, help="seconds one bench experiment may take")
    parser.add_argument("--select", metavar="FILE",
                        help="run only the test files and node ids listed in FILE, one a line (a rerun of what "
                             "failed, or of what an earlier check did not reach), instead of the whole suite")
    parser.add_argument("--time-limit", type=int, default=0,
                        help="seconds the whole check may take (default: no limit); a stage that would start "
                             "later is reported as not run, and each stage's limits shrink to what is left")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest after --, e.g. -- -k guard")
    return parser.parse_args(argv)


# ------------------------------------------------------------------ the machine and the image


def _machine() -> list:
    lines = [f"- Python {sys.version.split()[0]} ({sys.executable}), {os.cpu_count()} CPUs, checkout {ROOT}"]
    smi = shutil.which("nvidia-smi")
    if smi:
        query = subprocess.run([smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=60)
        for gpu in query.stdout.strip().splitlines():
            lines.append(f"- GPU: {gpu.strip()}")
    else:
        lines.append("- no nvidia-smi on PATH")
    versions = []
    for name in FRAMEWORKS:
        version = _version(name)
        if version:
            versions.append(f"{name} {version}")
    lines.append(f"- frameworks: {', '.join(versions) or 'none'}")
    return lines


def _version(module: str):
    if importlib.util.find_spec(module) is None:
        return None
    for distribution in (module, f"{module}-cpu", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "installed"


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _missing(summary: list, wheels) -> list:
    missing = [(module, dist, why) for module, dist, why in SUITE_NEEDS if not _installed(module)]
    absent = [f"{dist} ({why})" for module, dist, why in OPTIONAL if not _installed(module)]
    if absent:
        summary.append(f"- optional, absent: {'; '.join(absent)}")
    if missing:
        where = f"brought as wheels from {wheels}" if wheels else "missing"
        summary.append(f"- {where} for the suite: {', '.join(dist for _, dist, _ in missing)}")
    return missing


def _how_to_bring(missing: list) -> list:
    names = " ".join(dist for _, dist, _ in missing)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return ["", "The suite needs packages this Python lacks. On a machine with network access:", "",
            f"    pip download --no-deps --only-binary=:all: --python-version {version} -d wheels {names}",
            "", "then copy the wheels folder here and run again with --wheels wheels (nothing is installed "
            "into this Python: they go into the check's own temporary environment)."]


def _checkout_in_use(scratch: Path, wheels) -> dict:
    """The variables under which this Python runs this checkout as an editable install would:
    ``PYTHONPATH`` names the checkout and a folder holding a dist-info, whose entry points
    register the pytest plugin and the ``devshim`` command, and the wheels given, unpacked. No
    build backend runs and nothing is written into the image's Python (whose setuptools may be
    older than pyproject.toml asks, with no network to fetch another)."""
    site = scratch / "site"
    site.mkdir()
    version = _checkout_version()
    info = site / f"devshim-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: devshim\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("[console_scripts]\ndevshim = devshim.cli:main\n\n"
                                           "[pytest11]\ndevshim = devshim.pytest_plugin\n")
    for wheel in sorted(Path(wheels).glob("*.whl")) if wheels else ():
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    (site / f"{_PLUGIN}.py").write_text(_PLUGIN_SOURCE)
    paths = [str(ROOT), str(site), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(path for path in paths if path)}


#: A pytest plugin the passes load (-p): each test's outcome written as it is reported, so a pass
#: stopped at its time limit still says what ran, and what failed with its first line.
_PLUGIN = "devshim_gpu_check_outcomes"
_PLUGIN_SOURCE = '''import json, os

_WORKER = []


def pytest_configure(config):
    _WORKER.append(hasattr(config, "workerinput"))  # an xdist worker: its controller writes its reports


def pytest_collection_modifyitems(config, items):
    if os.environ.get("GPU_CHECK_SELECT"):  # tools/gpu_check.py --select: these node ids and files
        wanted = set(open(os.environ["GPU_CHECK_SELECT"]).read().splitlines())
        items[:] = [item for item in items if _wanted(item.nodeid, wanted)]


def _wanted(nodeid, wanted):
    """As on pytest's command line: the id itself, or its file, class or test without parameters."""
    parts = nodeid.split("[")[0].split("::")
    return nodeid in wanted or any("::".join(parts[:end]) in wanted for end in range(1, len(parts) + 1))


def pytest_runtest_logreport(report):
    if _WORKER[-1] or (report.when != "call" and report.outcome == "passed"):
        return
    message = str(report.longrepr).strip().splitlines()[-1][:200] if report.failed and report.longrepr else ""
    with open(os.environ["GPU_CHECK_OUTCOMES"], "a") as f:
        f.write(json.dumps([report.nodeid, report.when, report.outcome, message, round(report.duration, 2)]) + "\\n")
'''


def _checkout_version() -> str:
    for line in (ROOT / "devshim" / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    return "0"


# ------------------------------------------------------------------ the suite


def _passes(backends: list, no_virtual: bool) -> list:
    found = [(name, 0) for name in backends]
    if not no_virtual:
        found += [(name, VIRTUAL[name]) for name in backends if name in VIRTUAL]
    return found


def _suites(python: str, backends: list, args, out: Path, summary: Summary) -> bool:
    passes = _passes(backends, args.no_virtual)
    workers = args.workers or max(2, os.cpu_count() or 4)
    parallel = max(1, min(args.parallel, len(passes)))
    shares = _worker_shares(passes, workers, parallel) if _installed("xdist") else {}
    split = ", ".join(f"{name}{f' on {virtual}' if virtual else ''} {count}" for (name, virtual), count in shares.items())
    summary += ["", f"## Test suite ({len(passes)} passes, {parallel} at a time; xdist workers: {split or 'none'})", "",
                "| pass | passed | failed | errors | skipped | seconds |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    seconds = summary.left(args.pass_time)
    for stale in out.glob("outcomes-*.jsonl"):  # an earlier check's, into the same folder
        stale.unlink()
    ok = True
    failures = []
    with open(out / "suites.log", "w") as log, concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        plain = ",".join(name for name, virtual in passes if not virtual)
        running = {pool.submit(_one_pass, python, which, shares.get(which, 0), args, out, seconds, plain): which
                   for which in passes}
        for future in concurrent.futures.as_completed(running):  # each pass's row as soon as it ends
            name, virtual = running[future]
            label = f"{name}" + (f" on {virtual} virtual GPUs" if virtual else "")
            counts, text, took = future.result()
            log.write(f"\n######## {label}\n{text}")
            log.flush()
            summary.append(f"| {label} | {counts.get('passed', '?')} | {counts.get('failed', '?')} | "
                           f"{counts.get('errors', '?')} | {counts.get('skipped', '?')} | {took:.0f} |")
            # pytest's own exit status too: a pass that did not finish, or collected nothing, is no pass
            ok = ok and counts["exit"] == 0 and counts.get("failed") == 0 and counts.get("errors") == 0
            if counts["exit"] not in (0, 1, None):  # (None: stopped, which its counts say)
                failures.append(f"- {label}: pytest exited {counts['exit']} (suites.log says why)")
            failures += [f"- {label}: {line}" for line in counts.get("failures", [])]
    if failures:
        summary += ["", "Failures (first line of each; suites.log has the tracebacks):", "", *failures]
    summary += ["", "Slowest tests (where a pass's time goes; outcomes-*.jsonl has every test's):", "",
                *_slowest(out.glob("outcomes-*.jsonl"), 12)]
    return ok


def _worker_shares(passes: list, workers: int, parallel: int) -> dict:
    """xdist workers per pass: split by PASS_WEIGHT where every pass runs at once (a pass on
    virtual GPUs, which runs a part of the suite, weighs 1), evenly where they take turns."""
    if parallel < len(passes):
        return {which: max(1, workers // parallel) for which in passes}
    weights = {which: 1.0 if which[1] else PASS_WEIGHT.get(which[0], 1.0) for which in passes}
    total = sum(weights.values())
    return {which: max(1, round(workers * weight / total)) for which, weight in weights.items()}


def _slowest(files, count: int) -> list:
    timed = []
    for path in files:
        for line in path.read_text().splitlines():
            nodeid, when, _, _, *seconds = json.loads(line)
            if seconds and when == "call":
                timed.append((seconds[0], f"{path.stem.removeprefix('outcomes-')}: {nodeid}"))
    return [f"- {seconds:.1f} s {where}" for seconds, where in sorted(timed, reverse=True)[:count]]


def _one_pass(python: str, which: tuple, workers: int, args, out: Path, seconds: float, plain: str):
    name, virtual = which
    report = out / f".junit-{name}-{virtual}.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVSHIM_")}
    env.update(SHARED_GPU, DEVSHIM_BACKEND=name)
    if virtual:
        env["DEVSHIM_VIRTUAL_DEVICES"] = str(virtual)
    else:  # the plain passes are one run: a test they would all repeat runs in one (tests/conftest.py)
        env["DEVSHIM_TEST_PASSES"] = plain
    others = [f"tests/{pattern}" for other, patterns in OWN_FILES.items() if other != name for pattern in patterns]
    selection = ["tests"]
    if args.select:  # the files named, each filtered to the node ids named by the plugin below (an
        # id this machine's collection lacks, a parameter it does not have, is left out, not an error)
        chosen = _selected(args.select, name)
        (out / f".select-{name}.txt").write_text("\n".join(chosen) + "\n")
        env["GPU_CHECK_SELECT"] = str(out / f".select-{name}.txt")
        selection = list(dict.fromkeys(line.split("::")[0] for line in chosen))
    if virtual and not args.full_virtual and not args.select:
        selection = list(VIRTUAL_TESTS)
    # (pytest collects a file named here even where --ignore-glob matches it)
    selection = [path for path in selection if not any(fnmatch.fnmatch(path.split("::")[0], other) for other in others)]
    if not selection:
        return {"exit": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0}, "nothing selected for this pass\n", 0.0
    others = [f"--ignore-glob={pattern}" for pattern in others]
    outcomes = out / f"outcomes-{name}-{virtual}.jsonl"  # kept: every test's outcome and seconds
    env["GPU_CHECK_OUTCOMES"] = str(outcomes)
    command = [python, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "-p", _PLUGIN, f"--junitxml={report}",
               *(["-n", str(workers)] if workers else []), *others, *args.pytest_args, *selection]
    began = time.monotonic()
    code, text = _run(command, seconds, cwd=ROOT, env=env)
    counts = _junit_counts(report) if report.exists() else _outcome_counts(outcomes)
    counts["exit"] = code
    report.unlink(missing_ok=True)
    return counts, text, time.monotonic() - began


def _selected(path: str, backend: str) -> list:
    """The test files and node ids listed in `path` for `backend`'s pass: one a line, `#` starts
    a comment, and a line `torch: tests/...` is for that backend's pass alone."""
    found = []
    for line in Path(path).read_text().splitlines():
        line = line.split("  #")[0].strip() if not line.lstrip().startswith("#") else ""
        owner, _, rest = line.partition(": ")
        if owner in FRAMEWORKS and rest:
            if owner == backend:
                found.append(rest.strip())
        elif line:
            found.append(line)
    return found


def _outcome_counts(outcomes: Path) -> dict:
    """The counts of a pass that did not finish, from the outcomes written as tests ran."""
    found: dict = {}
    lines = outcomes.read_text().splitlines() if outcomes.exists() else []
    for nodeid, when, outcome, message, *_ in (json.loads(line) for line in lines):
        state = "failed" if outcome == "failed" and when == "call" else "errors" if outcome == "failed" else outcome
        if found.get(nodeid, ("passed", ""))[0] == "passed" or state in ("failed", "errors"):
            found[nodeid] = (state, message)
    counts = {key: sum(1 for state, _ in found.values() if state == key)
              for key in ("passed", "failed", "errors", "skipped")}
    counts["failures"] = [f"{nodeid}: {message}" for nodeid, (state, message) in found.items()
                          if state in ("failed", "errors")]
    counts["failures"].append("the pass did not finish in its time: these counts are of the tests that ran")
    return counts


def _junit_counts(report: Path) -> dict:
    root = ElementTree.parse(report).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    total = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
    lines = []
    for case in root.iter("testcase"):
        for problem in list(case.findall("failure")) + list(case.findall("error")):
            message = (problem.get("message") or "").strip().splitlines()
            lines.append(f"{case.get('classname')}::{case.get('name')}: {message[0][:200] if message else ''}")
    passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    return {"passed": passed, "failed": total["failures"], "errors": total["errors"], "skipped": total["skipped"],
            "failures": lines}


# ------------------------------------------------------------------ selftest, bench, extras


def _selftest(python: str, backends: list, out: Path, summary: Summary) -> bool:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVSHIM_")}
    env.update(SHARED_GPU)
    selected = [part for name in backends for part in ("--backend", name)]
    seconds = summary.left(600)
    if seconds < 10:
        summary += ["", "## devshim selftest", "", "not run: the check's time limit was reached"]
        return False
    code, text = _run([python, "-m", "devshim", "selftest", *selected], seconds, cwd=ROOT, env=env)
    (out / "selftest.txt").write_text(text)
    verdict = next((line for line in reversed(text.splitlines()) if line.startswith("verdict:")), "no verdict")
    failed = [line.strip() for line in text.splitlines() if line.strip().startswith("FAIL ")]
    summary += ["", "## devshim selftest", "", verdict, *(f"- {line}" for line in failed)]
    return code == 0


def _bench(python: str, out: Path, summary: Summary, seconds: int) -> None:
    listing = subprocess.run([python, "-c", "from devshim.bench.experiments import experiments\n"
                              "import json; print(json.dumps({n: e.per_backend for n, e in experiments().items()}))"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    summary += ["", "## devshim bench", ""]
    if listing.returncode != 0:
        summary.append(f"could not list the experiments: {listing.stderr[-500:]}")
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVSHIM_")}
    env.update(SHARED_GPU)
    with open(out / "bench.txt", "w") as log:
        for name, per_backend in json.loads(listing.stdout).items():
            command = [python, "-m", "devshim", "bench", name, "--min-run-time", "0.05", "--no-progress",
                       *(["--backend", "all"] if per_backend else [])]
            allowed = summary.left(seconds)
            if allowed < 5:
                summary += [f"### {name}: not run (the check's time limit was reached)", ""]
                continue
            code, text = _run(command, allowed, cwd=ROOT, env=env)
            status = "ok" if code == 0 else f"stopped after {allowed:.0f} s" if code is None else f"FAILED ({code})"
            log.write(f"\n######## bench {name}: {status}\n{text}")
            table = [line for line in text.splitlines() if line.startswith("|") or line.startswith(("!", "*"))]
            summary += [f"### {name}: {status}", "", *table, ""]


def _extras(python: str, out: Path, summary: Summary) -> None:
    """Checks in tools/ that compare devshim with the frameworks' own figures on this GPU."""
    for script in ("gpu_memory_check.py",):
        path = ROOT / "tools" / script
        if not path.exists():
            continue
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEVSHIM_")}
        env.update(SHARED_GPU)
        allowed = summary.left(300)
        if allowed < 5:
            summary += ["", f"## tools/{script}: not run (the check's time limit was reached)"]
            continue
        code, text = _run([python, str(path)], allowed, cwd=ROOT, env=env)
        (out / f"{path.stem}.txt").write_text(text)
        status = f"exit {code}" if code is not None else f"stopped after {allowed:.0f} s"
        summary += ["", f"## tools/{script} ({status})", "", "```", text[-6000:], "```"]


def _finish(out: Path, summary: Summary, ok: bool) -> int:
    summary.append(f"\nresult: {'PASSED' if ok else 'FAILED'}")
    print("\n".join(summary))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

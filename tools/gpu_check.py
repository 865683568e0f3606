"""The project's check on a machine with a real GPU, in one command that fits a lent machine:
`tools/gpu_memory_check.py` (devshim's memory figures against each framework's own),
`devshim selftest`, the test suite of every installed backend (plain, and on virtual GPUs beside
the real ones), a short `devshim bench`, and one summary.

For a machine whose Python already holds the frameworks (a lab or cloud GPU image) and that may
have no network. Nothing is installed into that Python: it runs this checkout through
``PYTHONPATH``, beside a temporary folder that registers devshim's pytest plugin and command as
an editable install would (no dependency is installed, no build backend runs). Packages the
suite needs that the image lacks are named, with how to bring them as wheels (``--wheels``).

    python tools/gpu_check.py --out gpu-check                 # all of it, in 540 s at most
    python tools/gpu_check.py --backends torch --no-virtual --no-bench
    python tools/gpu_check.py --update-weights gpu-check      # the passes' weights, from that run

``--time-limit`` (default 540 s) holds for the whole check: every stage, and every suite pass,
queued or not, gets what is left (the suite's passes leave ``--bench-time`` to the bench), and a
stage or pass that had no time left, or ran out of it, is reported as such and fails the check.
The summary (``summary.md`` in ``--out``, also printed) gives the memory comparison, the
selftest's verdict, per suite pass the counts of passed, failed, errors and skipped tests and
each failure's first line, the slowest tests, each bench experiment's table with the lines under
it, and the result with every reason it failed. It is rewritten as each stage ends, so a check
stopped from outside keeps what it found. The full logs lie beside it (``gpu_memory_check.txt``,
``selftest.txt``, ``suites.log``, ``bench.txt``), every test's outcome and seconds in
``outcomes-<backend>-<virtual GPUs>.jsonl``, each failure's traceback as it happened in
``failures-<backend>-<virtual GPUs>.txt`` and each pass's end in ``passes.json``, from which
``--update-weights`` measures how the passes share the machine next time. Exit status 0 when
every stage ran to its end without a failure. docs/contributing.md explains how to run it and
what to do with its results.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import fnmatch
import importlib.util
import json
import os
import runpy
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"
for _path in (str(ROOT), str(TOOLS)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import tox_facts  # noqa: E402
from devshim.backends import specs  # noqa: E402 - imports no framework

#: The backends, from devshim's registry (a backend is its folder: nothing here names one).
BACKENDS = tuple(specs())
#: Virtual GPUs per backend in its virtual pass, as the backend's tox env runs them (tox.ini).
VIRTUAL = {name: tox_facts.virtual_devices(name) for name, spec in specs().items()
           if spec.virtual_devices and tox_facts.virtual_devices(name)}
#: What the virtual pass runs beside the real GPUs (--full-virtual: everything): the contract, and
#: what virtual GPUs beside real ones can break (waiting, timing, defaults, the guard). Not a file
#: whose every test is `same_in_every_pass` (the examples' tests start interpreters that set their
#: own virtual GPUs): the plain passes run those once, and a virtual pass would only repeat them.
VIRTUAL_TESTS = ("tests/devshim_conformance", "tests/test_virtual_devices.py", "tests/test_timing.py",
                 "tests/test_torch_virtual.py", "tests/test_jax.py", "tests/test_jax_guard.py",
                 "tests/test_tensorflow.py", "tests/test_mxnet.py")
#: What the suite imports besides the frameworks: (module, distribution, needed by); the pins are
#: the torch env's in tox.ini.
SUITE_NEEDS = (
    ("pytest", "pytest", "the suite"),
    ("hypothesis", "hypothesis", "the suite"),
    ("array_api_compat", tox_facts.pinned("torch", "array-api-compat"),
     "ds.array_module on torch (torch's ops, the selftest)"),
    ("expecttest", tox_facts.pinned("torch", "expecttest"), "torch's device-generic tests on virtual GPUs"),
)
OPTIONAL = (
    ("xdist", "pytest-xdist", "running each pass on several cores (else one process per pass)"),
    ("matplotlib", "matplotlib", "the bench plots' tests"),
    ("tqdm", "tqdm", "progress bars (plain lines without)"),
)
#: How much test time each pass needs (seconds, or relative): measured by a check's outcome files
#: and written by --update-weights. Passes that run at once share the xdist workers in these
#: proportions, so that they end together.
WEIGHTS = TOOLS / "gpu_check_weights.json"
#: The pytest plugin the passes load (tools/gpu_check_plugin.py, copied beside the checkout's
#: registration): each test's outcome as it is reported, and --select.
PLUGIN = "gpu_check_plugin"
#: Seconds at most, and at least worth starting, for the stages that are not the suite's.
MEMORY_SECONDS, SELFTEST_SECONDS, FEWEST_SECONDS = 240, 300, 10
#: Seconds a suite pass needs at least to be worth starting (collection alone takes some).
FEWEST_PASS_SECONDS = 20

# Every process the check starts runs with these. JAX takes 75% of a GPU's memory at its first
# array unless told otherwise, TensorFlow all of it: several test processes share the GPU here, so
# each takes what it uses. (_checkout_in_use adds PYTHONPATH.)
SHARED_GPU = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_FORCE_GPU_ALLOW_GROWTH": "true",
              "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}


def main(argv=None) -> int:
    args = _arguments(argv)
    if args.update_weights:
        return update_weights(Path(args.update_weights), Path(args.weights_file))
    budget = Budget(args.time_limit)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    summary = Summary(out / "summary.md")
    summary += [f"# devshim GPU check ({time.strftime('%Y-%m-%d %H:%M')})", "", *_machine()]
    missing = _missing(summary, args.wheels)
    if missing and not args.wheels:
        summary += _how_to_bring(missing)
        summary.fail("the suite's packages are missing (above)")
        return _finish(summary, budget)
    with tempfile.TemporaryDirectory(prefix="devshim-gpu-check-") as scratch:
        env = _environment(_checkout_in_use(Path(scratch), args.wheels))
        backends = [name for name in (args.backends or BACKENDS) if _installed(name)]
        summary.append(f"- checked: {', '.join(backends) or 'no installed backend'}"
                       + (f" (asked for: {', '.join(args.backends)})" if args.backends else ""))
        if not args.no_bench:
            memory_check(sys.executable, backends, out, summary, budget, env)
        selftest(sys.executable, backends, out, summary, budget, env)
        reserve = 0.0 if args.no_bench else float(args.bench_time)
        suites(sys.executable, backends, args, out, summary, budget.until(reserve), env)
        if not args.no_bench:
            bench(sys.executable, backends, out, summary, budget, env)
    return _finish(summary, budget)


class Summary(list):
    """The summary's lines, written to `path` whenever a stage adds to it (a check stopped from
    outside, a lent machine's time running out, leaves what it had found), and the reasons the
    check failed (`fail`), one per failed stage or pass."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = path
        self.failures: list = []

    def __iadd__(self, lines):
        self.extend(lines)
        self.save()
        return self

    def append(self, line) -> None:
        super().append(line)
        self.save()

    def fail(self, reason: str) -> None:
        self.failures.append(reason)

    def save(self) -> None:
        self.path.write_text("\n".join(self) + "\n")


class Budget:
    """The check's time: `limit` seconds from now (0: no limit). `left(wanted)` is what a stage
    that wants `wanted` seconds may take; `until(reserve)` the same budget less `reserve` seconds
    kept for later stages."""

    def __init__(self, limit: float, started: Optional[float] = None, reserve: float = 0.0):
        self.limit, self.reserve = limit, reserve
        self.started = time.monotonic() if started is None else started

    def until(self, reserve: float) -> Budget:
        return Budget(self.limit, self.started, self.reserve + reserve)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self, wanted: float = float("inf")) -> float:
        if not self.limit:
            return wanted
        return max(0.0, min(wanted, self.limit - self.reserve - self.elapsed()))


def _run(command: list, seconds: float, split: bool = False, **options) -> tuple:
    """`(returncode or None if stopped, output, errors)` of `command`, stopped with everything it
    started (pytest-xdist's workers hold its pipes open) after `seconds`. Its standard error is in
    `output` too, unless `split`."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True,
                               stderr=subprocess.PIPE if split else subprocess.STDOUT, **options)
    try:
        output, errors = process.communicate(timeout=max(seconds, 1) if seconds != float("inf") else None)
        return process.returncode, output, errors or ""
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, errors = process.communicate()
        return None, f"{output}\nSTOPPED after {seconds:.0f} s (the check's time limit)", errors or ""


def _arguments(argv):
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", default="gpu-check", help="folder for the summary and the logs")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS,
                        help="the backends every stage checks (default: every installed one)")
    parser.add_argument("--no-virtual", action="store_true", help="no second pass on virtual GPUs")
    parser.add_argument("--full-virtual", action="store_true", help="the whole suite in the virtual passes too")
    parser.add_argument("--no-bench", action="store_true",
                        help="no measurements: neither the memory comparison nor the bench experiments")
    parser.add_argument("--wheels", help="a folder of wheels for what the image lacks (pip download ...)")
    parser.add_argument("--workers", type=int, default=0,
                        help="pytest-xdist workers in all (default: one per CPU; many tests wait on interpreters)")
    parser.add_argument("--parallel", type=int, default=0, help="suite passes run at once (default: all)")
    parser.add_argument("--pass-time", type=int, default=0,
                        help="seconds one suite pass may take (default: what the time limit leaves)")
    parser.add_argument("--bench-time", type=int, default=120,
                        help="seconds the bench experiments take in all, kept for them after the suite")
    parser.add_argument("--select", metavar="FILE",
                        help="run only the test files and node ids listed in FILE, one a line (a rerun of what "
                             "failed, or of what an earlier check did not reach), instead of the whole suite")
    parser.add_argument("--time-limit", type=int, default=540,
                        help="seconds the whole check may take (default 540: a lent machine's 10-minute command "
                             "with a minute to spare; 0: no limit); every stage and pass fits in what is left")
    parser.add_argument("--update-weights", metavar="OUT",
                        help="measure the passes' weights from the outcome files a check wrote in OUT, write "
                             "them to --weights-file, and stop")
    parser.add_argument("--weights-file", default=str(WEIGHTS), help=argparse.SUPPRESS)
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest after --, e.g. -- -k guard")
    return parser.parse_args(argv)


# ------------------------------------------------------------------ the machine and the image


@lru_cache(maxsize=None)
def _nvidia_gpus() -> tuple:
    """The GPUs nvidia-smi lists (name, memory, driver), or none where it is absent."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ()
    try:
        query = subprocess.run([smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(line.strip() for line in query.stdout.strip().splitlines() if line.strip())


def _machine() -> list:
    lines = [f"- Python {sys.version.split()[0]} ({sys.executable}), {os.cpu_count()} CPUs, checkout {ROOT}"]
    lines += [f"- GPU: {gpu}" for gpu in _nvidia_gpus()] or ["- no GPU listed by nvidia-smi"]
    versions = [f"{name} {specs()[name].version() or 'installed'}" for name in BACKENDS if _installed(name)]
    lines.append(f"- frameworks: {', '.join(versions) or 'none'}")
    return lines


def _installed(name: str) -> bool:
    spec = specs().get(name)
    return spec.is_installed() if spec is not None else importlib.util.find_spec(name) is not None


def _missing(summary: Summary, wheels) -> list:
    found = lambda module: importlib.util.find_spec(module) is not None  # noqa: E731
    missing = [(module, dist, why) for module, dist, why in SUITE_NEEDS if not found(module)]
    absent = [f"{dist} ({why})" for module, dist, why in OPTIONAL if not found(module)]
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
    register the pytest plugin and the ``devshim`` command, the check's own pytest plugin, and
    the wheels given, unpacked. No build backend runs and nothing is written into the image's
    Python (whose setuptools may be older than pyproject.toml asks, with no network to fetch
    another)."""
    site = scratch / "site"
    site.mkdir()
    version = _checkout_version()
    info = site / f"devshim-{version}.dist-info"
    info.mkdir()
    extras = "".join(f"Provides-Extra: {extra}\n" for extra in _extras())
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: devshim\nVersion: {version}\n{extras}")
    (info / "entry_points.txt").write_text("[console_scripts]\ndevshim = devshim.cli:main\n\n"
                                           "[pytest11]\ndevshim = devshim.pytest_plugin\n")
    for wheel in sorted(Path(wheels).glob("*.whl")) if wheels else ():
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    shutil.copy(TOOLS / f"{PLUGIN}.py", site / f"{PLUGIN}.py")
    paths = [str(ROOT), str(site), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(path for path in paths if path)}


def _environment(extra: dict) -> dict:
    """The environment of every process the check starts: this one's, less devshim's own
    variables, with the GPU-sharing settings and the checkout in use."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVSHIM_")}
    env.update(SHARED_GPU, **extra)
    return env


def _extras() -> list:
    """pyproject.toml's extras, as an installed devshim's metadata declares them (the suite reads
    them there); none where this Python cannot read TOML (before 3.11)."""
    try:
        import tomllib
    except ImportError:
        return []
    with open(ROOT / "pyproject.toml", "rb") as handle:
        return list(tomllib.load(handle)["project"].get("optional-dependencies", {}))


def _checkout_version() -> str:
    for line in (ROOT / "devshim" / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    return "0"


def _stage_time(summary: Summary, budget: Budget, wanted: float, heading: str) -> float:
    """The seconds a stage may take, or 0 with the summary saying it was not run (a failure)."""
    allowed = budget.left(wanted)
    if allowed < FEWEST_SECONDS:
        summary += [heading, "", f"not run: the check's time limit ({budget.limit} s) left {allowed:.0f} s"]
        summary.fail(f"{heading.lstrip('# ')}: not run (the time limit)")
        return 0.0
    return allowed


# ------------------------------------------------------------------ memory and the selftest


def memory_frameworks() -> tuple:
    """The backends tools/gpu_memory_check.py compares (its own list of what it measures)."""
    return tuple(runpy.run_path(str(TOOLS / "gpu_memory_check.py"))["SIDES"])


def memory_command(python: str, frameworks: list, out: Optional[Path] = None) -> list:
    """The memory comparison's command; with `out`, it writes there the estimates' results file
    (`gpu_estimates_results.json`: copied over tools/', it remakes docs/memory.md's table)."""
    keep = ["--write-estimates", str(out / "gpu_estimates_results.json")] if out is not None else []
    return [python, str(TOOLS / "gpu_memory_check.py"), "--frameworks", ",".join(frameworks), *keep]


def memory_check(python: str, backends: list, out: Path, summary: Summary, budget: Budget, env: dict) -> None:
    """tools/gpu_memory_check.py on the backends checked that it compares. A figure that differs
    or a framework that failed (its exit status 1), a check stopped at the time limit, or no GPU
    reached on a machine that has one (its 2) fail the check."""
    heading = "## GPU memory: tools/gpu_memory_check.py"
    chosen = [name for name in backends if name in memory_frameworks()]
    if not chosen:
        summary += ["", heading, "", "not run: none of the backends checked has a memory comparison"]
        return
    summary.append("")
    allowed = _stage_time(summary, budget, MEMORY_SECONDS, heading)
    if not allowed:
        return
    code, text, _ = _run(memory_command(python, chosen, out), allowed, cwd=ROOT, env=env)
    (out / "gpu_memory_check.txt").write_text(text)
    if code == 2 and not _nvidia_gpus():
        status = "no GPU here: nothing to compare"
    elif code != 0:
        status = {None: f"stopped after {allowed:.0f} s", 1: "FAILED: a figure differs, or a framework failed",
                  2: "FAILED: no framework reached the GPU nvidia-smi lists"}.get(code, f"FAILED (exit {code})")
        summary.fail(f"memory comparison: {status}")
    else:
        status = "every figure agrees"
    summary += [f"{heading} ({', '.join(chosen)}): {status}", "", "```", text.strip()[-6000:], "```"]


def selftest_command(python: str, backends: list) -> list:
    return [python, "-m", "devshim", "selftest", *[part for name in backends for part in ("--backend", name)]]


def selftest(python: str, backends: list, out: Path, summary: Summary, budget: Budget, env: dict) -> None:
    heading = "## devshim selftest"
    summary.append("")
    allowed = _stage_time(summary, budget, SELFTEST_SECONDS, heading)
    if not allowed:
        return
    code, text, _ = _run(selftest_command(python, backends), allowed, cwd=ROOT, env=env)
    (out / "selftest.txt").write_text(text)
    verdict = next((line for line in reversed(text.splitlines()) if line.startswith("verdict:")), "no verdict")
    failed = [line.strip() for line in text.splitlines() if line.strip().startswith("FAIL ")]
    summary += [heading, "", verdict, *(f"- {line}" for line in failed)]
    if code != 0:
        summary.fail("selftest: " + (f"stopped after {allowed:.0f} s" if code is None else f"exit {code}, {verdict}"))


# ------------------------------------------------------------------ the suite


def skips_without(path: Path) -> set:
    """The modules whose absence skips the whole test file `path` (a module-level
    `pytest.importorskip("torch")`)."""
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        call = getattr(node, "value", None)
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "importorskip"
                and call.args and isinstance(call.args[0], ast.Constant)):
            found.add(call.args[0].value)
    return found


@lru_cache(maxsize=None)
def own_files() -> dict:
    """{backend: its own test files}: those that skip whole without its framework, or are named
    after it (`test_cupy.py`, `test_torch_virtual.py`). Another backend's pass leaves them out, as
    each tox env holds one framework (the conformance suite runs every installed backend in every
    pass, through its harnesses)."""
    frameworks = {spec.import_name: name for name, spec in specs().items()}
    found: dict = {name: [] for name in BACKENDS}
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        owners = {frameworks[module] for module in skips_without(path) if module in frameworks}
        owners |= {name for name in BACKENDS if path.stem == f"test_{name}" or path.stem.startswith(f"test_{name}_")}
        for name in owners:
            found[name].append(f"tests/{path.name}")
    return found


def passes(backends: list, no_virtual: bool) -> list:
    """(backend, virtual GPUs) of each pass: every backend plain, then on its virtual GPUs."""
    found = [(name, 0) for name in backends]
    if not no_virtual:
        found += [(name, VIRTUAL[name]) for name in backends if name in VIRTUAL]
    return found


def pass_key(which: tuple) -> str:
    """A pass's name in its outcome file and the weights: `torch-0`, `jax-4`."""
    return f"{which[0]}-{which[1]}"


def pass_weights(found: list, path: Path = WEIGHTS) -> dict:
    """The weight of each pass in `found`: its measured test seconds (tools/gpu_check_weights.json),
    or, for one never measured, the median of those that were."""
    measured = json.loads(path.read_text())["seconds"] if path.exists() else {}
    default = statistics.median(measured.values()) if measured else 1.0
    return {which: float(measured.get(pass_key(which), default)) for which in found}


def worker_shares(found: list, workers: int, parallel: int, weights: Optional[dict] = None) -> dict:
    """xdist workers per pass: shared by weight where every pass runs at once (so they end
    together), evenly where they take turns."""
    if parallel < len(found):
        return {which: max(1, workers // parallel) for which in found}
    weights = weights if weights is not None else pass_weights(found)
    total = sum(weights[which] for which in found) or 1.0
    return {which: max(1, round(workers * weights[which] / total)) for which in found}


def suites(python: str, backends: list, args, out: Path, summary: Summary, budget: Budget, env: dict) -> None:
    found = passes(backends, args.no_virtual)
    workers = args.workers or max(2, os.cpu_count() or 4)
    parallel = max(1, min(args.parallel or len(found), len(found)))
    shares = worker_shares(found, workers, parallel) if importlib.util.find_spec("xdist") else {}
    split = ", ".join(f"{pass_key(which)} {count}" for which, count in shares.items())
    summary += ["", f"## Test suite ({len(found)} passes, {parallel} at a time; xdist workers: {split or 'none'})",
                "", "| pass | passed | failed | errors | skipped | seconds |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for stale in [*out.glob("outcomes-*.jsonl"), *out.glob("failures-*.txt"), out / "passes.json"]:  # an earlier check's
        stale.unlink(missing_ok=True)
    ended, failures = {}, []
    plain = ",".join(name for name, virtual in found if not virtual)
    with open(out / "suites.log", "w") as log, concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        running = {pool.submit(one_pass, python, which, shares.get(which, 0), args, out, budget, env, plain): which
                   for which in found}
        for future in concurrent.futures.as_completed(running):  # each pass's row as soon as it ends
            which = running[future]
            counts, text, took = future.result()
            log.write(f"\n######## {_label(which)}\n{text}")
            log.flush()
            summary.append(f"| {_label(which)} | {counts.get('passed', '?')} | {counts.get('failed', '?')} | "
                           f"{counts.get('errors', '?')} | {counts.get('skipped', '?')} | {took:.0f} |")
            failures += _judge_pass(which, counts, summary)
            ended[pass_key(which)] = {"exit": counts["exit"], "seconds": round(took, 1),
                                      "complete": counts["exit"] in (0, 1)}
    (out / "passes.json").write_text(json.dumps(ended, indent=2) + "\n")
    if failures:
        summary += ["", "Failures (first line of each; failures-<pass>.txt has each traceback, also of a "
                    "pass stopped at the time limit):", "", *failures]
    summary += ["", "Slowest tests (where a pass's time goes; outcomes-*.jsonl has every test's):", "",
                *_slowest(out.glob("outcomes-*.jsonl"), 12)]


def _label(which: tuple) -> str:
    return which[0] + (f" on {which[1]} virtual GPUs" if which[1] else "")


def _judge_pass(which: tuple, counts: dict, summary: Summary) -> list:
    """The failure lines of one pass, its failure recorded: pytest's own exit status counts too
    (a pass stopped, not started, or that collected nothing, is no pass)."""
    label, code = _label(which), counts["exit"]
    lines = [f"- {label}: {line}" for line in counts.get("failures", [])]
    if code == "not run":
        summary.fail(f"{label}: not run (the time limit)")
    elif code is None:
        summary.fail(f"{label}: stopped at the time limit")
    elif code != 0 or counts.get("failed") or counts.get("errors"):
        summary.fail(f"{label}: {counts.get('failed', '?')} failed, {counts.get('errors', '?')} errors (exit {code})")
        if code not in (0, 1):
            lines.append(f"- {label}: pytest exited {code} (suites.log says why)")
    return lines


def _slowest(files, count: int) -> list:
    timed = []
    for path in files:
        for line in path.read_text().splitlines():
            nodeid, when, _, _, *seconds = json.loads(line)
            if seconds and when == "call":
                timed.append((seconds[0], f"{path.stem.removeprefix('outcomes-')}: {nodeid}"))
    return [f"- {seconds:.1f} s {where}" for seconds, where in sorted(timed, reverse=True)[:count]]


def suite_command(python: str, which: tuple, workers: int, args, report: Path, selection: list, ignored: list) -> list:
    return [python, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "-p", PLUGIN, f"--junitxml={report}",
            *(["-n", str(workers)] if workers else []), *[f"--ignore-glob={path}" for path in ignored],
            *args.pytest_args, *selection]


def one_pass(python: str, which: tuple, workers: int, args, out: Path, budget: Budget, env: dict, plain: str):
    """Run one pass, with what the time limit leaves when it starts (a queued pass too);
    `(counts, output, seconds)`, counts["exit"] "not run" when nothing was left."""
    name, virtual = which
    seconds = budget.left(args.pass_time or float("inf"))
    if seconds < FEWEST_PASS_SECONDS:
        note = f"not run: the check's time limit left {seconds:.0f} s when its turn came\n"
        return {"exit": "not run", "passed": 0, "failed": 0, "errors": 0, "skipped": 0}, note, 0.0
    env = dict(env, DEVSHIM_BACKEND=name)
    if virtual:
        env["DEVSHIM_VIRTUAL_DEVICES"] = str(virtual)
    else:  # the plain passes are one run: a test they would all repeat runs in one (tests/conftest.py)
        env["DEVSHIM_TEST_PASSES"] = plain
    ignored = [path for other, paths in own_files().items() if other != name for path in paths]
    selection = _selection(which, args, out, env)
    # (pytest collects a file named here even where --ignore-glob matches it)
    selection = [path for path in selection if not any(fnmatch.fnmatch(path.split("::")[0], other) for other in ignored)]
    if not selection:
        return {"exit": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0}, "nothing selected for this pass\n", 0.0
    report = out / f".junit-{pass_key(which)}.xml"
    outcomes = out / f"outcomes-{pass_key(which)}.jsonl"  # kept: every test's outcome and seconds
    env["GPU_CHECK_OUTCOMES"] = str(outcomes)
    env["GPU_CHECK_FAILURES"] = str(out / f"failures-{pass_key(which)}.txt")  # tracebacks, as they happen
    began = time.monotonic()
    code, text, _ = _run(suite_command(python, which, workers, args, report, selection, ignored), seconds,
                         cwd=ROOT, env=env)
    counts = _junit_counts(report) if report.exists() else _outcome_counts(outcomes)
    counts["exit"] = code
    report.unlink(missing_ok=True)
    return counts, text, time.monotonic() - began


def _selection(which: tuple, args, out: Path, env: dict) -> list:
    """What one pass runs: the suite, the virtual tests, or --select's files (each filtered to
    its node ids by the plugin: an id this machine's collection lacks is left out, not an error)."""
    name, virtual = which
    if args.select:
        chosen = selected(args.select, name)
        (out / f".select-{name}.txt").write_text("\n".join(chosen) + "\n")
        env["GPU_CHECK_SELECT"] = str(out / f".select-{name}.txt")
        return list(dict.fromkeys(line.split("::")[0] for line in chosen))
    if virtual and not args.full_virtual:
        return list(VIRTUAL_TESTS)
    return ["tests"]


def selected(path: str, backend: str) -> list:
    """The test files and node ids listed in `path` for `backend`'s pass: one a line, `#` starts
    a comment, and a line `torch: tests/...` is for that backend's pass alone."""
    found = []
    for line in Path(path).read_text().splitlines():
        line = line.split("  #")[0].strip() if not line.lstrip().startswith("#") else ""
        owner, _, rest = line.partition(": ")
        if owner in BACKENDS and rest:
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
    counts: dict = {key: sum(1 for state, _ in found.values() if state == key)
                    for key in ("passed", "failed", "errors", "skipped")}
    counts["failures"] = [f"{nodeid}: {message}" for nodeid, (state, message) in found.items()
                          if state in ("failed", "errors")]
    counts["failures"].append("the pass did not finish in its time: these counts are of the tests that ran")
    return counts


def _junit_counts(report: Path) -> dict:
    root = ElementTree.parse(report).getroot()
    suites_found = [root] if root.tag == "testsuite" else list(root)
    total = {key: sum(int(s.get(key, 0)) for s in suites_found) for key in ("tests", "failures", "errors", "skipped")}
    lines = []
    for case in root.iter("testcase"):
        for problem in list(case.findall("failure")) + list(case.findall("error")):
            message = (problem.get("message") or "").strip().splitlines()
            lines.append(f"{case.get('classname')}::{case.get('name')}: {message[0][:200] if message else ''}")
    passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    return {"passed": passed, "failed": total["failures"], "errors": total["errors"], "skipped": total["skipped"],
            "failures": lines}


# ------------------------------------------------------------------ the bench


def bench_runs(python: str, backends: list, env: dict) -> list:
    """(experiment, backends or None) for each bench run: a per-backend experiment once on the
    backends checked that have an ops module (`--backend torch,jax`), another once where the
    framework it needs is checked; those that run once last (`virtual`, the longest, takes what
    the others left)."""
    code = ("import json\nfrom devshim.bench.experiments import experiments\n"
            "print(json.dumps({n: [e.per_backend, e.framework] for n, e in experiments().items()}))")
    listing = subprocess.run([python, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    if listing.returncode != 0:
        raise RuntimeError(f"could not list the experiments: {listing.stderr.strip()[-500:]}")
    with_ops = ",".join(name for name in backends if specs()[name].has_module("ops"))
    runs, once = [], []
    for name, (per_backend, framework) in json.loads(listing.stdout.strip().splitlines()[-1]).items():
        if per_backend and with_ops:
            runs.append((name, with_ops))
        elif not per_backend and (framework is None or framework in backends):
            once.append((name, None))
    return runs + once


#: Each experiment's sizes in the check: a short bench, whose tables show each experiment working on
#: the GPU (a matrix product large enough to be the GPU's, a transfer of 16 MiB) in about 10 s each
#: (measured on torch, JAX and NumPy with 2 CPU cores: 130 s for all ten, where their defaults took 355 s).
BENCH_ARGS = {
    "matmul": ["--sizes", "256", "2048"],
    "logging": ["--size", "256", "--steps", "10"],
    "parallel": ["--size", "256", "--repeats", "2"],
    "transfer": ["--sizes", "1", "16"],
    "overhead": ["--threads", "1"],
    "guard": ["--size", "256"],
    "startup": [],
    "convert": ["--sizes", "64", "1048576"],
    "virtual": ["--examples", "256", "--batch-size", "64"],
    "memory": ["--megabytes", "16", "--width", "1024", "--batch", "64"],
}
#: Each timed run's least seconds in the check's bench (the experiments' default is longer).
BENCH_MIN_RUN_TIME = "0.01"


def bench_command(python: str, name: str, backend: Optional[str]) -> list:
    return [python, "-m", "devshim", "bench", name, "--min-run-time", BENCH_MIN_RUN_TIME, "--no-progress",
            *BENCH_ARGS.get(name, []), *(["--backend", backend] if backend else [])]


def bench_table(output: str) -> list:
    """The table an experiment printed and every line under it (the marks' footnotes, the busy
    machine's line, the rows it left out), without its title and `wrote` lines."""
    lines = output.strip().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    if start is None:  # no row, only why (a machine without a device)
        start = next((i + 1 for i, line in enumerate(lines) if line.startswith("devshim bench ")), 0)
    return [line for line in lines[start:] if not line.startswith("wrote ")]


def bench(python: str, backends: list, out: Path, summary: Summary, budget: Budget, env: dict) -> None:
    """Each experiment, short (`BENCH_ARGS`, `--min-run-time 0.01`), sharing what is left of the time limit."""
    summary += ["", "## devshim bench", ""]
    try:
        runs = bench_runs(python, backends, env)
    except (RuntimeError, subprocess.TimeoutExpired, ValueError) as error:
        summary.append(str(error))
        summary.fail("bench: the experiments could not be listed")
        return
    with open(out / "bench.txt", "w") as log:
        for done, (name, backend) in enumerate(runs):
            title = f"{name}" + (f" on {backend.replace(',', ', ')}" if backend else "")
            allowed = budget.left() / (len(runs) - done) if budget.limit else 600.0
            if allowed < FEWEST_SECONDS / 2:
                summary += [f"### {title}: not run (the check's time limit was reached)", ""]
                summary.fail(f"bench {title}: not run (the time limit)")
                continue
            code, text, errors = _run(bench_command(python, name, backend), allowed, split=True, cwd=ROOT, env=env)
            status = "ok" if code == 0 else f"stopped after {allowed:.0f} s" if code is None else f"FAILED ({code})"
            log.write(f"\n######## bench {title}: {status}\n{text}\n{errors}")
            if code != 0:
                summary.fail(f"bench {title}: {status}")
            shown = bench_table(text) if code == 0 else (text.strip() + "\n" + errors.strip()).strip().splitlines()[-5:]
            summary += [f"### {title}: {status}", "", *shown, ""]


# ------------------------------------------------------------------ the verdict, and the weights


def _finish(summary: Summary, budget: Budget) -> int:
    summary.append(f"\ntotal: {budget.elapsed():.0f} s")
    if summary.failures:
        summary += ["", "result: FAILED", *(f"- {reason}" for reason in summary.failures)]
    else:
        summary.append("result: PASSED")
    print("\n".join(summary))
    return 1 if summary.failures else 0


def _provenance(folder: Path) -> str:
    """Where a check's figures come from: its summary's heading and machine lines."""
    path = folder / "summary.md"
    lines = path.read_text().splitlines() if path.exists() else []
    said = [line.lstrip("#- ").strip() for line in lines[:8] if line.startswith(("# devshim GPU check", "- "))]
    return "; ".join(said) or f"the check in {folder}"


def update_weights(folder: Path, target: Path) -> int:
    """Write the passes' weights, their test seconds in the outcome files of the check that wrote
    `folder`, to `target`. A pass that did not finish weighs at least the seconds its tests took
    before it was stopped, and its earlier weight scaled as the measured ones moved where that is
    more (the scale from the finished passes, else, as a lower bound, from the unfinished ones);
    exit status 1 when no pass finished there."""
    ended_path = folder / "passes.json"
    if not ended_path.exists():
        print(f"{ended_path} is missing: give the --out folder of a check that ran the suite")
        return 1
    ended = json.loads(ended_path.read_text())
    measured, partial = {}, {}
    for key, info in ended.items():
        outcomes = folder / f"outcomes-{key}.jsonl"
        lines = [json.loads(line) for line in outcomes.read_text().splitlines() if line.strip()] \
            if outcomes.exists() else []
        seconds = round(sum(line[4] for line in lines if len(line) > 4), 1)
        if info.get("complete") and outcomes.exists():
            measured[key] = seconds
        else:
            print(f"{key}: did not finish there; it weighs at least its {seconds:.0f} s so far")
            partial[key] = seconds
    if not measured:
        print(f"no pass finished in {folder}: {target} is left as it is")
        return 1
    old = json.loads(target.read_text())["seconds"] if target.exists() else {}
    shared = [measured[key] / old[key] for key in measured if old.get(key)]
    at_least = [partial[key] / old[key] for key in partial if old.get(key) and partial[key]]
    scale = statistics.median(shared) if shared else statistics.median(at_least) if at_least else None
    kept = {key: round(value * scale, 1) for key, value in old.items() if key not in measured and scale}
    for key, seconds in partial.items():
        kept[key] = max(kept.get(key, 0.0), seconds)
    document = {"measured": _provenance(folder),
                "command": "python tools/gpu_check.py --update-weights OUT rewrites this file from the outcome files "
                           "a check wrote in OUT",
                "seconds": dict(sorted({**{k: v for k, v in kept.items() if v}, **measured}.items()))}
    target.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {target}: {document['seconds']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

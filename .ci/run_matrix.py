"""Run the tox matrix for CI (`.ci/run` calls this): every env of tox's envlist, two at a time on
a machine with two cores or more, each env's output printed whole when it ends, then a summary.

Two at a time because a test run is mostly one Python process on one core: on a 2-core machine
as slow as CI's slower one, the matrix took 67 minutes one env after another (CI, f9a3ab1) and
about 44 two at a time (2345 s measured on such a machine at cc9422e, where one env stopped
before its second pass, about 5 minutes of one lane).
The suite keeps its figures true on a busy machine (the version sweep runs two sweeps side by
side the same way). Disk is what limits it: an env that installs a CUDA build of torch takes 5 to
7 GB, and unpacking its wheels about 4 GB more; tox.ini gives those envs the label `large`, and
only one `large` env runs at a time (with the largest small env beside it, interop's 3 GB, about
14 GB at most). Each
lane runs tox in its own copy of the checkout (.git included, .tox left out) with its own work
folder: tox builds devshim's sdist in the source tree for every env, and two builds at once in one
tree clash (setuptools' egg-info and release folders). Each env's folder is deleted once it has run.

    python3 .ci/run_matrix.py              # what .ci/run does
    CI_LANES=1 python3 .ci/run_matrix.py   # one env at a time
    CI_ENVS=lint,docs python3 .ci/run_matrix.py   # those envs of the matrix only
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Seconds one env may take in all (the longest measured took about 650, on a busy 2-core machine).
ENV_LIMIT = 1500
#: No env starts after this many seconds of the run: those left are reported as not run (CI's
#: own limit is 90 minutes, and a run stopped there prints no summary).
RUN_LIMIT = 4800
LARGE = "large"


def tox(*arguments: str) -> list:
    found = subprocess.run([sys.executable, "-m", "tox", *arguments], cwd=ROOT, capture_output=True, text=True)
    if found.returncode != 0:
        sys.exit(f"ci: tox {' '.join(arguments)} failed:\n{found.stdout}{found.stderr}")
    return found.stdout.split()


def free_gb() -> str:
    return f"{shutil.disk_usage(ROOT).free / 2**30:.1f}"


def folder_size(path: Path) -> str:
    if not path.exists():
        return "none"
    size = subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True).stdout.split()
    return size[0] if size else "?"


def copy_checkout(target: Path) -> Path:
    """A copy of the checkout as it is (uncommitted changes and .git included), without tox's folders."""
    shutil.copytree(ROOT, target, symlinks=True,
                    ignore=shutil.ignore_patterns(".tox", "__pycache__", "*.egg-info", ".pytest_cache"))
    return target


class Matrix:
    """The envs left to run, handed to the lanes in envlist order; a `large` env only while no
    other `large` one runs."""

    def __init__(self, envs: list, large: set, lanes: int) -> None:
        self.waiting = list(envs)
        self.large = large
        self.lanes = lanes
        self.large_running = False
        self.results: dict = {}
        self.began = time.monotonic()
        self.copy = copy_checkout  # what gives each lane its checkout (tests give a stand-in)
        self.condition = threading.Condition()
        self.print_lock = threading.Lock()

    def take(self):
        """The next env this lane may run, or None when none is left."""
        with self.condition:
            while True:
                if not self.waiting:
                    return None
                left = RUN_LIMIT - (time.monotonic() - self.began)
                if left < 300:
                    for env in self.waiting:
                        self.results[env] = (f"{'NOT RUN':<7} (the run had {left:.0f} s of its {RUN_LIMIT} left)", 1)
                    self.waiting.clear()
                    return None
                for env in self.waiting:
                    if env not in self.large or not self.large_running:
                        self.waiting.remove(env)
                        self.large_running |= env in self.large
                        return env, left
                self.condition.wait()

    def done(self, env: str, line: str, failed: int) -> None:
        with self.condition:
            self.results[env] = (line, failed)
            if env in self.large:
                self.large_running = False
            self.condition.notify_all()

    def lane(self, number: int) -> None:
        workdir = ROOT / ".tox" / f"lane{number}"
        with tempfile.TemporaryDirectory(prefix=f"devshim-ci-lane{number}-") as copies:
            checkout = ROOT if self.lanes == 1 else self.copy(Path(copies) / "devshim")
            while True:
                taken = self.take()
                if taken is None:
                    return
                env, left = taken
                try:
                    self.run(env, workdir, min(ENV_LIMIT, int(left)), checkout)
                except Exception as error:  # noqa: BLE001 - the env fails; the lanes and the summary go on
                    print(f"ci: {env} could not run: {error!r}", flush=True)
                    self.done(env, f"{'FAILED':<7} (could not run: {error!r})", 1)

    def run(self, env: str, workdir: Path, limit: int, checkout: Path = ROOT) -> None:
        log_path = workdir / f"{env}.log"
        workdir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with open(log_path, "w", encoding="utf-8") as log:
            process = subprocess.Popen([sys.executable, "-m", "tox", "run", "-e", env, "--workdir", str(workdir)],
                                       cwd=checkout, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code = process.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                code = None
        seconds = time.monotonic() - started
        result = "ok" if code == 0 else "TIMEOUT" if code is None else "FAILED"
        size = folder_size(workdir / env)
        shutil.rmtree(workdir / env, ignore_errors=True)
        with self.print_lock:
            print(f"\n===== ci: {env} ({result}, {seconds:.0f} s) =====", flush=True)
            sys.stdout.write(log_path.read_text(encoding="utf-8", errors="replace"))
            if code is None:
                print(f"ci: {env} stopped after its limit of {limit} s")
            sys.stdout.flush()
        line = f"{result:<7} {seconds:5.0f}s  env {size:>5}  then {free_gb()} GB free"
        self.done(env, line, 0 if code == 0 else 1)


def main() -> int:
    envs = tox("list", "--no-desc", "-d")
    if os.environ.get("CI_ENVS"):  # a part of the matrix, to try this script: CI_ENVS=lint,docs
        envs = [env for env in envs if env in os.environ["CI_ENVS"].split(",")]
    if not envs:
        print("ci: tox lists no env: is tox.ini's envlist empty?")
        return 1
    large = set(tox("list", "--no-desc", "-m", LARGE)) & set(envs)
    lanes = max(1, min(int(os.environ.get("CI_LANES", "2")), os.cpu_count() or 1))
    print(f"ci: {free_gb()} GB free on this disk; {len(envs)} envs, {lanes} at a time, one of the "
          f"`{LARGE}` ones ({', '.join(sorted(large)) or 'none'}) at a time", flush=True)
    matrix = Matrix(envs, large, lanes)
    threads = [threading.Thread(target=matrix.lane, args=(n,)) for n in range(1, lanes + 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.monotonic() - matrix.began
    print(f"\nci: summary ({took:.0f} s in all)")
    failed = 0
    for env in envs:
        line, bad = matrix.results.get(env, ("NOT RUN", 1))
        failed |= bad
        print(f"  {env:<18} {line}")
    if failed:
        print("ci: FAILED (see the envs marked FAILED, TIMEOUT or NOT RUN above)")
    return failed


if __name__ == "__main__":
    sys.exit(main())

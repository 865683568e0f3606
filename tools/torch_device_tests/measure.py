"""Run PyTorch's own device-generic test files on the CPU and on devshim's virtual GPUs, and
compare: of the tests that pass on the CPU and are not CPU-only, how many pass on ``vgpu``.

PyTorch's ``test/`` folder is not part of its wheel and is never committed here: fetch it
(README.md in this folder says how) and point ``--tests`` at it. Each file runs in its own
pytest process with the plugin ``devshim_device_tests`` (this folder), which registers the
virtual GPUs before torch's test framework is imported; torch then instantiates every test
class for the CPU and for ``vgpu`` (``TestFooCPU.test_x_cpu``, ``TestFooPRIVATEUSE1.test_x_vgpu``).

    python tools/torch_device_tests/measure.py --tests ~/pytorch/test --out /tmp/device-tests \\
        --sample test_reductions.py=0.2

The interpreter running it needs torch, devshim (this checkout is put on PYTHONPATH),
pytest, expecttest and pytest-timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
FILES = ("test_view_ops.py", "test_indexing.py", "test_shape_ops.py", "test_tensor_creation_ops.py",
         "test_reductions.py", "test_binary_ufuncs.py", "test_nn.py")

# Why torch's framework skips a test on a device type: the test is not meant for it (a
# CPU-only test), which is no difference between the CPU and a virtual GPU.
_NOT_FOR_THIS_DEVICE = re.compile(
    r"Only runs on|onlyCPU|only runs on cpu|doesn't work on privateuse1|not supported on privateuse1"
    r"|Skipped for privateuse1|skipPRIVATEUSE1|Only runs on \['cpu'\]|only for cpu", re.IGNORECASE)


def run_file(args, name: str, out: Path) -> dict:
    """Run one test file for both device types; its results (nodeid -> outcome) or its error."""
    results = out / f"{name}.json"
    log = out / f"{name}.log"
    fraction = dict(args.sample).get(name, 1.0)
    command = [args.python, "-m", "pytest", name, "-p", "devshim_device_tests", "-p", "no:cacheprovider",
               "-q", "--noconftest", "--timeout", str(args.timeout), "--devshim-sample", str(fraction),
               "--devshim-results", str(results), *args.pytest_args]
    env = dict(os.environ, DEVSHIM_BACKEND="torch", DEVSHIM_VIRTUAL_DEVICES=str(args.virtual),
               PYTORCH_TEST_WITH_SLOW="0",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")]))
    with open(log, "w", encoding="utf-8") as stream:
        done = subprocess.run(command, cwd=args.tests, env=env, stdout=stream, stderr=subprocess.STDOUT)
    text = log.read_text(encoding="utf-8")
    if not results.exists() or "during collection" in text:
        return {"error": _first_error(text), "returncode": done.returncode}
    return {"results": json.loads(results.read_text(encoding="utf-8")), "sample": fraction}


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if "Error:" in line and line.startswith("E "):
            return line[1:].strip()[:300]
    return text.strip().splitlines()[-1][:300] if text.strip() else "no output"


def _twin(nodeid: str):
    """The CPU test a ``vgpu`` test is the twin of, or None when ``nodeid`` is no vgpu test."""
    path, _, rest = nodeid.partition("::")
    cls, _, name = rest.rpartition("::")
    # torch names the class after the device type it has then: privateuse1 until the first
    # class's setUpClass renames it (a second instantiate_device_type_tests call says VGPU).
    suffix = next((s for s in ("PRIVATEUSE1", "VGPU") if cls.endswith(s)), None)
    tokens = name.split("_")
    if suffix is None or "vgpu" not in tokens:
        return None
    tokens[tokens.index("vgpu")] = "cpu"
    return f"{path}::{cls[:-len(suffix)]}CPU::{'_'.join(tokens)}"


def compare(results: dict) -> dict:
    """The figure for one file: CPU passes, those not CPU-only, and what their vgpu twins did."""
    twins = {cpu: vgpu for vgpu in results if (cpu := _twin(vgpu)) is not None}
    cpu_passes = [nodeid for nodeid, r in results.items()
                  if "CPU::" in nodeid and r["outcome"] == "passed"]
    counted, passed, cpu_only, misses = 0, 0, 0, []
    for cpu in cpu_passes:
        vgpu = twins.get(cpu)
        outcome = results[vgpu] if vgpu is not None else None
        if outcome is None or (outcome["outcome"] == "skipped"
                               and _NOT_FOR_THIS_DEVICE.search(outcome["reason"])):
            cpu_only += 1
            continue
        counted += 1
        if outcome["outcome"] == "passed":
            passed += 1
        else:
            misses.append({"test": vgpu, "outcome": outcome["outcome"], "reason": outcome["reason"]})
    vgpu_only = [nodeid for nodeid, r in results.items() if _twin(nodeid) is not None
                 and r["outcome"] == "passed" and results.get(_twin(nodeid), {}).get("outcome") != "passed"]
    return {"cpu_passes": len(cpu_passes), "cpu_only": cpu_only, "counted": counted, "passed": passed,
            "misses": misses, "vgpu_passes_cpu_did_not": len(vgpu_only)}


def report(figures: dict) -> str:
    """A Markdown table of the figures and the list of misses."""
    lines = ["| file | sample | CPU passes | CPU-only | counted | pass on vgpu | share |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    total_counted = total_passed = 0
    misses = []
    for name, figure in figures.items():
        if "error" in figure:
            lines.append(f"| {name} | | does not import: {figure['error']} | | | | |")
            continue
        f = figure["figure"]
        total_counted += f["counted"]
        total_passed += f["passed"]
        share = f"{100 * f['passed'] / f['counted']:.1f}%" if f["counted"] else "-"
        lines.append(f"| {name} | {figure['sample']:.0%} | {f['cpu_passes']} | {f['cpu_only']} | "
                     f"{f['counted']} | {f['passed']} | {share} |")
        misses += f["misses"]
    if total_counted:
        lines.append(f"| all | | | | {total_counted} | {total_passed} | "
                     f"{100 * total_passed / total_counted:.2f}% |")
    lines += ["", f"Misses ({len(misses)}):"]
    lines += [f"- `{m['test']}` ({m['outcome']}): {m['reason']}" for m in misses]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", required=True, type=Path, help="PyTorch's test/ folder")
    parser.add_argument("--out", required=True, type=Path, help="folder for logs and results")
    parser.add_argument("--files", nargs="*", default=list(FILES))
    parser.add_argument("--sample", nargs="*", default=[], type=lambda s: (s.split("=")[0], float(s.split("=")[1])),
                        help="FILE=FRACTION: run that share of a file's tests (both devices alike)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds one test may take")
    parser.add_argument("--virtual", type=int, default=2, help="virtual GPUs to present")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    figures = {}
    for name in args.files:
        ran = run_file(args, name, args.out)
        if "results" in ran:
            ran["figure"] = compare(ran.pop("results"))
        figures[name] = ran
        print(f"{name}: {ran.get('figure', ran)}", file=sys.stderr)
    (args.out / "figures.json").write_text(json.dumps(figures, indent=1), encoding="utf-8")
    text = report(figures)
    (args.out / "figures.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

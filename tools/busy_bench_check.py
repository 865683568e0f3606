"""Does `devshim bench` stay honest on a busy machine? Compare busy runs with a quiet reference.

Issue 38's check: on a machine kept busy by other processes running torch matmuls, `devshim
bench overhead` and `devshim bench matmul`, run ten times each, must never give a figure far
from the quiet machine's (a ratio off by more than 2x, a time off by more than 5x) without
marking that row (`*`, `+` or `~`).

1. On a quiet machine (check `uptime`: the lowest load average you can find), record the
   reference: the median of each row's figures over a few runs.

       python tools/busy_bench_check.py reference --out quiet.json

2. Then run the check: it starts the loaders (by default two processes, each looping a 256x256
   torch matmul on torch's default threads), runs each bench ten times, stops the loaders, and
   prints every figure that was far from the reference, and whether its row was marked.

       python tools/busy_bench_check.py check --reference quiet.json

   The exit status is 1 when a far figure was not marked, else 0. `--loaders 0` runs the same
   comparison without load (a quiet run against the reference). Both commands record the load
   average before and after each bench run in their JSON (`--out`).

Run it with a Python that has torch (for example `.tox/torch/bin/python tools/busy_bench_check.py
...`); the benches run in child processes (`python -m devshim bench ... --backend torch`) that
import this checkout's devshim.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

BENCHES = {
    "overhead": ["overhead"],
    "matmul": ["matmul"],
}
#: The figures compared, per experiment: (row field, what it is). A "ratio" is far when off by
#: more than RATIO_LIMIT either way, a "time" when off by more than TIME_LIMIT.
FIGURES = {
    "overhead": [("ratio", "ratio"), ("native_seconds", "time"), ("devshim_seconds", "time")],
    "matmul": [("seconds", "time"), ("cpu_over_device", "ratio")],
}
RATIO_LIMIT, TIME_LIMIT = 2.0, 5.0
LOADER = "import torch\na = torch.rand({n}, {n})\nwhile True:\n    a @ a\n"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load() -> float:
    return os.getloadavg()[0]


def _row_key(experiment: str, row: dict) -> str:
    if experiment == "overhead":
        return f"{row['backend']} {row['device']} {row['operation']}"
    return f"{row['backend']} {row['device']} n={row['size']}"


def _marked(row: dict) -> str:
    return ("*" if row.get("noisy") else "") + ("+" if row.get("settled") is False else "") + \
        ("~" if row.get("stalled") else "")


def _environment() -> dict:
    """This checkout's devshim first on the path (not an older copy installed in the env)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    return env


def run_bench(experiment: str, extra: list) -> dict:
    """One `devshim bench` run in a child process; its JSON document, with the load around it."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "rows.json")
        before = _load()
        command = [sys.executable, "-m", "devshim", "bench", *BENCHES[experiment], "--backend", "torch",
                   "--no-progress", "--json", path, *extra]
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=_environment())
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    document["load_before"], document["load_after"] = before, _load()
    return document


def collect(runs: int, extra: list) -> dict:
    """experiment -> list of documents, ``runs`` of each bench, taking turns."""
    found: dict = {name: [] for name in BENCHES}
    for i in range(runs):
        for name in BENCHES:
            document = run_bench(name, extra)
            found[name].append(document)
            print(f"  {name} run {i + 1}/{runs}: load {document['load_before']:.2f} -> "
                  f"{document['load_after']:.2f}", flush=True)
    return found


def reference(args) -> int:
    print(f"load average now: {_load():.2f} (the lower, the better the reference)")
    documents = collect(args.runs, args.bench_args)
    # Each figure's median over the runs whose row was not marked: on a shared machine even the
    # quietest moment has stalls, and a marked row says its figure is not the machine's best.
    figures: dict = {}
    for experiment, docs in documents.items():
        for field, _ in FIGURES[experiment]:
            for document in docs:
                for row in document["rows"]:
                    value = row.get(field)
                    if value is not None:
                        kept = figures.setdefault(experiment, {}).setdefault(_row_key(experiment, row), {}) \
                            .setdefault(field, {"all": [], "unmarked": []})
                        kept["all"].append(value)
                        if not _marked(row):
                            kept["unmarked"].append(value)
    medians = {e: {k: {f: statistics.median(v["unmarked"] or v["all"]) for f, v in fs.items()}
                   for k, fs in rows.items()} for e, rows in figures.items()}
    result = {"medians": medians, "runs": documents,
              "loads": {e: [(d["load_before"], d["load_after"]) for d in docs] for e, docs in documents.items()}}
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1, default=str)
    for experiment, rows in medians.items():
        for key, fields in rows.items():
            print(f"{experiment:9} {key:45} " + "  ".join(f"{f}={v:.4g}" for f, v in fields.items()))
    print(f"wrote {args.out}")
    return 0


def _far(kind: str, value: float, quiet: float) -> bool:
    if value <= 0 or quiet <= 0:
        return False
    off = max(value / quiet, quiet / value)
    return off > (RATIO_LIMIT if kind == "ratio" else TIME_LIMIT)


def start_loaders(count: int, size: int) -> list:
    code = LOADER.format(n=size)
    loaders = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]
    time.sleep(3 if loaders else 0)  # let them start their thread pools and push the load up
    return loaders


def stop_loaders(loaders: list) -> None:
    for process in loaders:
        process.kill()
    for process in loaders:
        process.wait()


def check(args) -> int:
    with open(args.reference, encoding="utf-8") as handle:
        quiet = json.load(handle)["medians"]
    loaders = start_loaders(args.loaders, args.loader_size)
    try:
        print(f"{len(loaders)} loaders ({args.loader_size}x{args.loader_size} torch matmuls); "
              f"load average now: {_load():.2f}")
        documents = collect(args.runs, args.bench_args)
    finally:
        stop_loaders(loaders)
    unmarked, far_count, lines = 0, 0, []
    summary: dict = {}
    for experiment, docs in documents.items():
        for document in docs:
            for row in document["rows"]:
                key = _row_key(experiment, row)
                for field, kind in FIGURES[experiment]:
                    value, reference_value = row.get(field), quiet.get(experiment, {}).get(key, {}).get(field)
                    if value is None or reference_value is None:
                        continue
                    entry = summary.setdefault((experiment, key, field), {"quiet": reference_value, "busy": []})
                    marks = _marked(row)
                    entry["busy"].append((value, marks))
                    if _far(kind, value, reference_value):
                        far_count += 1
                        unmarked += not marks
                        lines.append(f"{'MARKED  ' if marks else 'UNMARKED'} {experiment:9} {key:40} {field:16} "
                                     f"{value:.4g} vs quiet {reference_value:.4g} {marks}")
    print(f"\n{'experiment':9} {'row':40} {'figure':16} {'quiet':>9}  busy runs (marks)")
    for (experiment, key, field), entry in summary.items():
        busy = ", ".join(f"{v:.3g}{m}" for v, m in entry["busy"])
        print(f"{experiment:9} {key:40} {field:16} {entry['quiet']:9.3g}  {busy}")
    print(f"\nfar from the quiet figure (ratio off > {RATIO_LIMIT:g}x, time off > {TIME_LIMIT:g}x): "
          f"{far_count}, of which unmarked: {unmarked}")
    for line in lines:
        print("  " + line)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump({"runs": documents, "far": lines, "unmarked": unmarked,
                       "summary": [[*k, v["quiet"], v["busy"]] for k, v in summary.items()]},
                      handle, indent=1, default=str)
        print(f"wrote {args.out}")
    return 1 if unmarked else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ref = sub.add_parser("reference", help="record the quiet machine's figures")
    ref.add_argument("--out", required=True, help="where to write the reference JSON")
    ref.add_argument("--runs", type=int, default=3, help="runs of each bench (default 3)")
    busy = sub.add_parser("check", help="run the benches on a busy machine and compare")
    busy.add_argument("--reference", required=True, help="the reference JSON from `reference`")
    busy.add_argument("--runs", type=int, default=10, help="runs of each bench (default 10)")
    busy.add_argument("--loaders", type=int, default=2, help="loader processes (default 2)")
    busy.add_argument("--loader-size", type=int, default=256, help="their matmul size (default 256)")
    busy.add_argument("--out", help="write every run and the verdict as JSON")
    for one in (ref, busy):
        one.add_argument("bench_args", nargs="*", help="more arguments for each bench (after --)")
    args = parser.parse_args(argv)
    return reference(args) if args.command == "reference" else check(args)


if __name__ == "__main__":
    sys.exit(main())

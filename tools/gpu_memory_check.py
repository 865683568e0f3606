"""Compare ``ds.memory`` with each framework's own memory figures on a real GPU.

For each framework installed here (PyTorch, JAX, CuPy, TensorFlow, MXNet; absent ones are
skipped, saying so), a fresh interpreter makes a few allocations on GPU 0 and prints, after
each, what ``ds.memory("gpu:0")`` says beside what the framework itself says
(``torch.cuda.memory_allocated``/``memory_reserved``/``max_memory_allocated``/``mem_get_info``,
JAX's ``device.memory_stats()``, CuPy's memory pool and ``cudaMemGetInfo``, TensorFlow's
``get_memory_info``, MXNet's ``gpu_memory_info``), then what ``ds.memory_peak`` measures around
a temporary allocation, and whether devshim recognises the framework's own out-of-memory error.
For PyTorch and JAX it then sets ``ds.estimate_memory``'s figure for tests/memory_steps.py's MLP
and small CNN trained with Adam (the steps tests/test_memory.py compares on virtual GPUs) beside
the peak the framework's allocator measures when the step runs, each in a fresh interpreter, with
their ratio: an estimate is a plan, shown beside the truth and not failed on. A PyTorch step then
runs once more op by op (``where_the_peak_is``), to say which operation its peak is reached in and
which kernels took memory beyond the step's tensors (cuDNN's and cuBLAS's workspaces); the CNN
runs again with cuDNN off, and JAX's smaller steps again with its pool preallocated and with
cudaMallocAsync (``VARIANTS``), to say how much of a difference is the kernels' or the allocator's.
Needs no network; run it from a checkout (it imports the devshim beside it):

    python tools/gpu_memory_check.py                     # every installed framework
    python tools/gpu_memory_check.py --frameworks torch,jax --json gpu-memory.json

Each framework runs in its own process: JAX and TensorFlow take most of a GPU when they start.
Here JAX is started with XLA_PYTHON_CLIENT_PREALLOCATE=false and TensorFlow with memory growth,
so both take what they use (``--preallocate`` leaves the frameworks' defaults). A line marked
``DIFFERS`` is a figure of ``ds.memory`` that is not the framework's own; the exit status is 1
when there is one, or when a framework's process failed (or ran past ``--seconds``), 2 when no
framework could run on a GPU. ``tools/gpu_check.py`` runs it, on the backends it checks.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRAMEWORKS = ("torch", "jax", "cupy", "tensorflow", "mxnet")
MiB = 2**20
#: The allocations, in order: (what, bytes); "free a" drops the first one.
STEPS = (("alloc a", 64 * MiB), ("alloc b", 256 * MiB), ("free a", 0))
PEAK_BYTES = 512 * MiB
FIELDS = ("in_use", "reserved", "peak", "total", "free")


# ------------------------------------------------------------------ each framework's side


def _torch():
    import torch

    device = torch.device("cuda", 0)

    def own():
        free, total = torch.cuda.mem_get_info(0)
        return {"in_use": torch.cuda.memory_allocated(0), "reserved": torch.cuda.memory_reserved(0),
                "peak": torch.cuda.max_memory_allocated(0), "total": total, "free": free}

    def alloc(size):
        x = torch.empty(size, dtype=torch.uint8, device=device)
        torch.cuda.synchronize(0)
        return x

    def huge():
        return torch.empty(2**50, dtype=torch.uint8, device=device)

    return device, own, alloc, huge, torch.cuda.is_available() and torch.cuda.device_count() > 0


def _jax():
    import jax
    import jax.numpy as jnp
    import numpy as np

    gpus = [d for d in jax.devices() if d.platform != "cpu"]
    device = gpus[0] if gpus else None

    def own():
        stats = device.memory_stats() or {}
        limit, used = stats.get("bytes_limit"), stats.get("bytes_in_use")
        return {"in_use": used, "reserved": stats.get("pool_bytes"), "peak": stats.get("peak_bytes_in_use"),
                "total": limit, "free": None if limit is None or used is None else limit - used}

    def alloc(size):
        return jax.device_put(np.zeros(size, np.uint8), device).block_until_ready()

    def huge():
        with jax.default_device(device):
            return jnp.ones((2**25, 2**25), jnp.float32).block_until_ready()

    return device, own, alloc, huge, device is not None


def _cupy():
    import cupy

    ok = cupy.cuda.runtime.getDeviceCount() > 0
    device = cupy.cuda.Device(0)
    pool = cupy.get_default_memory_pool()

    def own():
        with device:
            free, total = cupy.cuda.runtime.memGetInfo()
            return {"in_use": pool.used_bytes(), "reserved": pool.total_bytes(), "peak": None,
                    "total": total, "free": free}

    def alloc(size):
        with device:
            x = cupy.empty(size, dtype=cupy.uint8)
            device.synchronize()
            return x

    def huge():
        with device:
            return cupy.empty(2**50, dtype=cupy.uint8)

    return device, own, alloc, huge, ok


def _tensorflow():
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        if not os.environ.get("DEVSHIM_CHECK_PREALLOCATE"):
            tf.config.experimental.set_memory_growth(gpu, True)

    def own():
        info = tf.config.experimental.get_memory_info("GPU:0")
        return {"in_use": info["current"], "reserved": None, "peak": info["peak"], "total": None, "free": None}

    def alloc(size):
        with tf.device("/GPU:0"):
            x = tf.zeros([size], tf.uint8)
            _ = x.numpy()[:1]  # wait for it
            return x

    def huge():
        with tf.device("/GPU:0"):
            return tf.zeros([2**25, 2**25], tf.float32)

    return "/GPU:0", own, alloc, huge, bool(gpus)


def _mxnet():
    import mxnet as mx

    ok = mx.context.num_gpus() > 0
    device = mx.gpu(0)

    def own():
        free, total = mx.context.gpu_memory_info(0)
        return {"in_use": None, "reserved": None, "peak": None, "total": total, "free": free}

    def alloc(size):
        x = mx.nd.zeros((size,), ctx=device, dtype="uint8")
        x.wait_to_read()
        return x

    def huge():
        x = mx.nd.zeros((2**30, 2**10), ctx=device, dtype="float32")  # 4 TiB
        x.wait_to_read()
        return x

    return device, own, alloc, huge, ok


SIDES = {"torch": _torch, "jax": _jax, "cupy": _cupy, "tensorflow": _tensorflow, "mxnet": _mxnet}


# ------------------------------------------------------------------ one framework, in this process


def _record(step: str, ds, device, own) -> dict:
    mine = ds.memory(device)
    theirs = own()
    return {"step": step, "devshim": {f: getattr(mine, f) for f in FIELDS}, "framework": theirs,
            "source": mine.source}


def _peak(ds, device, alloc, own) -> dict:
    with ds.memory_peak(device) as peak:
        x = alloc(PEAK_BYTES)
        del x
    return {"step": f"memory_peak around a {PEAK_BYTES // MiB} MiB temporary",
            "devshim": {"peak": peak.peak, "added": peak.added, "method": peak.method},
            "framework": {"peak": own().get("peak")}, "source": ""}


def _out_of_memory(ds, name: str, huge) -> dict:
    try:
        huge()
    except Exception as error:  # noqa: BLE001 - whatever the framework raises is what is checked
        named = ds.backends.memory(name).is_out_of_memory(error)
        return {"step": "the framework's out-of-memory error", "devshim": {"recognised": named},
                "framework": {"error": f"{type(error).__module__}.{type(error).__name__}: {str(error)[:120]}"},
                "source": ""}
    return {"step": "the framework's out-of-memory error", "devshim": {"recognised": None},
            "framework": {"error": "none: the huge allocation succeeded"}, "source": ""}


#: The steps whose estimate (`ds.estimate_memory`) is compared with the peak the GPU's allocator
#: measures: tests/memory_steps.py's MLP and small CNN with Adam, at the batch sizes
#: tests/test_memory.py compares on virtual GPUs and at 16 times those.
ESTIMATED = {"torch": (("mlp", 512), ("cnn", 256), ("mlp", 8192), ("cnn", 4096)),
             "jax": (("mlp", 4096), ("cnn", 512), ("mlp", 65536), ("cnn", 8192))}
#: The XLA flag JAX's steps are measured with: autotuning's buffers would raise the allocator's
#: lifetime peak above what the step itself takes (JAX's peak cannot be reset).
NO_AUTOTUNE = "--xla_gpu_autotune_level=0"
#: Steps measured a second time, changed as named: PyTorch's CNN with cuDNN off (torch's own
#: convolution kernels). Its peak on CUDA was 2.1 times its estimate at batch 4096 (H200,
#: 2026-11-28) where the MLP's was 1.2 times; an estimate sees the step's tensors, not a kernel's
#: workspace, and the two peaks side by side say how much of the difference is cuDNN's.
CUDNN_OFF = "cuDNN off"
#: JAX's two smaller steps measured again under other allocators. The check starts JAX without
#: preallocation (XLA_PYTHON_CLIENT_PREALLOCATE=false), and its BFC allocator then grows its pool
#: in regions of doubling size; its count (`bytes_in_use`, and so the peak) is of the blocks it
#: hands out, and it does not split a free block less than twice the request unless that wastes
#: 128 MiB or more: a step's buffers may take a whole region of up to twice their size. The larger
#: steps were within 0.1% of their estimates, the smaller 1.28 and 1.35 times (the CNN at batch 512
#: measured 128.3 MiB, a 128 MiB region's size; H200, 2026-11-28). With the pool preallocated
#: (JAX's default; a twentieth of the GPU here, as these processes run side by side) every block
#: is split from one large region; cudaMallocAsync's allocator counts the bytes asked for.
PREALLOCATED = "pool preallocated"
CUDA_ASYNC = "cudaMallocAsync"
VARIANTS = {"torch": {CUDNN_OFF: (("cnn", 256), ("cnn", 4096))},
            "jax": {PREALLOCATED: (("mlp", 4096), ("cnn", 512)), CUDA_ASYNC: (("mlp", 4096), ("cnn", 512))}}
#: The environment of a JAX variant's process (JAX reads it when it starts its GPU client), and
#: the preallocated pool's share of the GPU, set under whichever of its two names the environment
#: uses (the CUDA plugin refuses both).
ALLOCATOR_SETTINGS = {PREALLOCATED: {"XLA_PYTHON_CLIENT_PREALLOCATE": "true"},
                      CUDA_ASYNC: {"XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async"}}
PREALLOCATED_FRACTION = "0.05"


def variant_environment(env: dict, variant: str) -> dict:
    """`env` with JAX variant `variant`'s allocator settings (`ALLOCATOR_SETTINGS`; none for
    another variant).

    Example:
        >>> variant_environment({}, PREALLOCATED)
        {'XLA_PYTHON_CLIENT_PREALLOCATE': 'true', 'XLA_PYTHON_CLIENT_MEM_FRACTION': '0.05'}
    """
    changed = {**env, **ALLOCATOR_SETTINGS.get(variant, {})}
    if variant == PREALLOCATED:
        name = "XLA_CLIENT_MEM_FRACTION" if "XLA_CLIENT_MEM_FRACTION" in env else "XLA_PYTHON_CLIENT_MEM_FRACTION"
        changed[name] = PREALLOCATED_FRACTION
    return changed


def _steps():
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import memory_steps

    return memory_steps


def where_the_peak_is(ds, device, run) -> dict:
    """Where `run()`'s peak on torch device `device` is reached, operation by operation: each ATen
    operation it runs (forward and backward) is measured on its own (`ds.memory_peak`: on CUDA,
    torch's counter reset around it) beside what was in use before and after it. An operation's
    scratch is its peak above both: memory it took and gave back inside (a kernel's workspace,
    cuDNN's or cuBLAS's), which no count of the step's tensors sees. Gives the operation at the
    step's peak (`at`), the bytes in use before it (`before`) and at the peak (`peak`), above
    what was in use when `run` began, its scratch, and the operations with the most scratch.

    Example:
        >>> where_the_peak_is(ds, torch.device("cuda", 0), lambda: step(4096, "cuda"))["at"]
        'aten.convolution_backward.default'
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    scratch: dict = {}  # operation -> (calls, its most scratch in one call)
    top: dict = {"peak": -1}

    class PerOperation(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            with ds.memory_peak(device) as peak:
                result = func(*args, **(kwargs or {}))
            name = str(func)
            inside = max(0, peak.peak - max(peak.start, peak.end))
            calls, most = scratch.get(name, (0, 0))
            scratch[name] = (calls + 1, max(most, inside))
            if peak.peak > top["peak"]:
                top.update(peak=peak.peak, at=name, before=peak.start, scratch=inside)
            return result

    start = ds.memory(device).in_use
    with PerOperation():
        run()
    largest = sorted(scratch.items(), key=lambda item: -item[1][1])[:5]
    return {"at": top.get("at"), "before": top.get("before", start) - start, "peak": max(top["peak"], start) - start,
            "scratch": top.get("scratch", 0),
            "most scratch": [{"op": name, "calls": calls, "scratch": most} for name, (calls, most) in largest if most]}


def _torch_estimate(ds, model: str, batch: int, variant: str = "") -> dict:
    """The estimate under FakeTensorMode on "cuda", and the step's peak above what was allocated
    before it, by torch's own counter (reset first). The step runs once before it is measured:
    cuBLAS's and cuDNN's workspaces, made at their first use and kept, are not the step's.
    `variant` CUDNN_OFF runs the step on torch's own convolutions (`VARIANTS`)."""
    import gc

    import torch

    torch.backends.cudnn.enabled = variant != CUDNN_OFF
    step = getattr(_steps(), f"torch_{model}")
    found = ds.estimate_memory(step, batch, "cuda", backend="torch")
    step(batch, "cuda")
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    step(batch, "cuda")
    torch.cuda.synchronize()
    return {"estimate": found.peak, "measured": torch.cuda.max_memory_allocated() - before,
            "how": "torch.cuda.max_memory_allocated after reset_peak_memory_stats, less what was allocated before"
                   + ("" if torch.backends.cudnn.enabled else " (torch.backends.cudnn.enabled = False)"),
            "where": where_the_peak_is(ds, torch.device("cuda", 0), lambda: step(batch, "cuda"))}


def _jax_estimate(ds, model: str, batch: int) -> dict:
    """The compiled step's estimate (XLA's memory analysis: outputs and temporaries, the arguments
    being on the GPU already) and its first run's peak above the bytes in use before it
    (`first_run_rise`)."""
    import jax

    device = [d for d in jax.devices() if d.platform != "cpu"][0]
    step, state, x, y = _steps().jax_training(model, batch, device)
    found = ds.estimate_memory(step, state, x, y, backend="jax")
    compiled = jax.jit(step).lower(state, x, y).compile()
    jax.block_until_ready((state, x, y))
    before = device.memory_stats()
    jax.block_until_ready(compiled(state, x, y))
    return {"estimate": found.peak - found.details["arguments"], **first_run_rise(before, device.memory_stats())}


def first_run_rise(before, after) -> dict:
    """A JAX step's first run's peak above the bytes in use before it (`measured`, and `how`),
    from the allocator's `memory_stats()` before and after the run: its lifetime peak, which
    cannot be reset, so the figure holds only when the run raised it. An allocator that keeps
    no peak (stats None, or without one) gives no figure, and says so.

    Example:
        >>> first_run_rise({"bytes_in_use": 10, "peak_bytes_in_use": 50}, {"bytes_in_use": 30, "peak_bytes_in_use": 90})
        {'measured': 80, 'how': 'peak_bytes_in_use after the first run, less bytes_in_use before it'}
    """
    if not (before and after and "peak_bytes_in_use" in before and "peak_bytes_in_use" in after):
        return {"measured": None, "how": f"the allocator keeps no peak (memory_stats(): {sorted(after or {})})"}
    raised = after["peak_bytes_in_use"] > before["peak_bytes_in_use"]
    return {"measured": after["peak_bytes_in_use"] - before["bytes_in_use"] if raised else None,
            "how": "peak_bytes_in_use after the first run, less bytes_in_use before it"
                   + ("" if raised else f": not raised by the run (the compilation's peak, "
                                        f"{before['peak_bytes_in_use'] / MiB:.1f} MiB, is above it)")}


def estimate_one(name: str, model: str, batch: int, variant: str = "") -> dict:
    """One step's estimate and measured peak on GPU 0, in this (fresh) process (`variant`: one of
    `VARIANTS`' names, or "" for the step as it is)."""
    sys.path.insert(0, ROOT)
    import devshim as ds

    ds.set_backend(name)
    try:
        found = (_torch_estimate(ds, model, batch, variant) if name == "torch" else _jax_estimate(ds, model, batch))
    except (ds.MemoryEstimateUnsupportedError, ds.MemoryEstimateError) as error:
        found = {"estimate": None, "measured": None, "how": str(error)[:160]}
    return {"step": _estimate_step(model, batch, variant), "devshim": {"estimate": found["estimate"]},
            "framework": {"measured peak": found["measured"]}, "source": "", "how": found["how"],
            "ratio": None if not found["estimate"] or found["measured"] is None
            else found["measured"] / found["estimate"], **({"where": found["where"]} if "where" in found else {})}


def _estimate_step(model: str, batch: int, variant: str = "") -> str:
    """An estimate record's step: "estimate: cnn with Adam, batch 4096, cuDNN off"."""
    return f"estimate: {model} with Adam, batch {batch}" + (f", {variant}" if variant else "")


def run_one(name: str) -> dict:
    """Every record of framework ``name`` on GPU 0, in this process."""
    sys.path.insert(0, ROOT)
    import devshim as ds

    device, own, alloc, huge, has_gpu = SIDES[name]()
    if not has_gpu:
        return {"framework": name, "skipped": f"{name} sees no GPU here"}
    ds.set_backend(name)
    gpu = ds.gpu(0)
    records = [_record("start", ds, gpu, own)]
    kept = {}
    for step, size in STEPS:
        if size:
            kept[step] = alloc(size)
        else:
            kept.pop("alloc a", None)
        records.append(_record(f"{step} ({size // MiB} MiB)" if size else step, ds, gpu, own))
    records.append(_peak(ds, gpu, alloc, own))
    records.append(_out_of_memory(ds, name, huge))
    return {"framework": name, "device": str(ds.memory(gpu).device), "records": records}


# ------------------------------------------------------------------ the estimates, kept


def estimate_rows(results: list) -> list:
    """The estimate records of `results` (as `--json` writes them), one row each, in MiB.

    Example:
        >>> estimate_rows(results)[0]["ratio"]
        1.026
    """
    rows = []
    for result in results:
        for record in result.get("records", ()):
            found = re.fullmatch(r"estimate: (\w+) with Adam, batch (\d+)(?:, (.+))?", record["step"])
            if not found or record.get("ratio") is None:
                continue
            rows.append({"framework": result["framework"], "model": found.group(1), "batch": int(found.group(2)),
                         **({"variant": found.group(3)} if found.group(3) else {}),
                         "estimate_mib": round(record["devshim"]["estimate"] / MiB, 1),
                         "measured_mib": round(record["framework"]["measured peak"] / MiB, 1),
                         "ratio": round(record["ratio"], 3), "measured_as": record["how"]})
    return rows


def estimates_table(document: dict) -> str:
    """docs/memory.md's table of estimates against a real GPU, from the results file
    (tools/gpu_estimates_results.json): a row per step, and the run it came from.

    Example:
        >>> print(estimates_table(json.load(open("tools/gpu_estimates_results.json"))).splitlines()[2])
        | PyTorch | MLP with Adam | 512 | 38.0 | 39.0 | 1.026 |
    """
    names = {"torch": "PyTorch", "jax": "JAX", "mlp": "MLP with Adam", "cnn": "small CNN with Adam"}
    lines = ["| framework | step | batch | estimate MiB | measured MiB | measured / estimate |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {names[row['framework']]} | {names[row['model']]}{', ' + row['variant'] if 'variant' in row else ''} | "
              f"{row['batch']} | {row['estimate_mib']:.1f} | "
              f"{row['measured_mib']:.1f} | {row['ratio']:.3f} |" for row in document["rows"]]
    lines += ["", f"Measured on {document['machine']}, {document['date']}, commit {document['commit']} "
                  f"(`devshim/` tree {document['devshim_tree'][:10]}), by {document['command']}."]
    return "\n".join(lines)


def estimates_document(results: list) -> dict:
    """The results file's content for this run: its rows, the machine, and the code measured."""
    def git(*args):
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() or "unknown"

    gpus = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                          capture_output=True, text=True) if shutil.which("nvidia-smi") else None
    versions = [f"{name} {importlib.metadata.version(name)}" for name in ESTIMATED
                if importlib.util.find_spec(name) is not None]
    machine = ", ".join([*(gpus.stdout.strip().splitlines() if gpus else ["no nvidia-smi"]),
                         f"Python {sys.version.split()[0]}", *versions])
    return {"machine": machine, "date": time.strftime("%Y-%m-%d"), "commit": git("rev-parse", "--short", "HEAD"),
            "devshim_tree": git("rev-parse", "HEAD:devshim"),
            "command": "`tools/gpu_memory_check.py`, run by `tools/gpu_check.py`", "rows": estimate_rows(results)}


# ------------------------------------------------------------------ the report


def _differs(record: dict) -> list:
    """The figures devshim and the framework both have and disagree on (a framework with no
    figure of its own, CuPy's peak, is nothing to disagree with: devshim's is its sampled one)."""
    mine, theirs = record["devshim"], record["framework"]
    return [f for f in FIELDS if f in mine and theirs.get(f) is not None and mine[f] != theirs[f]]


def _mib(value) -> str:
    if isinstance(value, bool):  # (a bool is an int: "recognised" read 0.0 for True)
        return "yes" if value else "no"
    return "-" if value is None else f"{value / MiB:.1f}" if isinstance(value, int) else str(value)


def report(results: list) -> int:
    status, ran = 0, False
    for result in results:
        print(f"\n== {result['framework']}")
        if "error" in result:  # its process failed: nothing it measured can be trusted
            print(f"   FAILED: {result['error']}")
            status = 1
            continue
        if "skipped" in result:
            print(f"   {result['skipped']}")
            continue
        ran = True
        print(f"   {result['device']}: MiB, devshim / {result['framework']}")
        for record in result["records"]:
            shown = "  ".join(f"{k} {_mib(record['devshim'].get(k))} / {_mib(record['framework'].get(k))}"
                              for k in sorted(set(record["devshim"]) | set(record["framework"])))
            wrong = _differs(record)
            if record["devshim"].get("recognised") is False:
                wrong.append("recognised")
            if record.get("failed"):
                wrong.append("its process failed")
            status = 1 if wrong else status
            print(f"   {record['step']:<40} {shown}" + (f"   DIFFERS: {', '.join(wrong)}" if wrong else ""))
            if "how" in record:
                ratio = record.get("ratio")
                print(f"   {'':<40} " + ("" if ratio is None else f"measured / estimate {ratio:.3f}"
                                          + ("" if abs(ratio - 1) <= 0.05 else " (outside 5%)") + "; ")
                      + f"measured: {record['how']}")
            if record.get("where"):
                print(f"   {'':<40} {where_line(record['where'])}")
    return status if ran or status else 2


def where_line(where: dict) -> str:
    """`where_the_peak_is`'s answer in a line of the report, in MiB.

    Example:
        >>> where_line({"at": "aten.mm.default", "before": 3 * MiB, "peak": 5 * MiB, "scratch": 1 * MiB,
        ...             "most scratch": [{"op": "aten.mm.default", "calls": 4, "scratch": 1 * MiB}]})
        'its peak, run op by op: 5.0 MiB, inside aten.mm.default (3.0 MiB in use before it, 1.0 MiB scratch); most scratch: aten.mm.default 1.0 MiB (4 calls)'
    """
    most = ", ".join(f"{op['op']} {_mib(op['scratch'])} MiB ({op['calls']} call{'s' * (op['calls'] != 1)})"
                     for op in where["most scratch"])
    return (f"its peak, run op by op: {_mib(where['peak'])} MiB, inside {where['at']} ({_mib(where['before'])} MiB in "
            f"use before it, {_mib(where['scratch'])} MiB scratch); most scratch: {most or 'none'}")


def _measure_in_child(name: str, env: dict, seconds: int, *which: str) -> dict:
    """`run_one(name)` (or, with `which`, `estimate_one(name, *which)`) in a fresh interpreter:
    its records, or an error saying how it failed."""
    option = ["--one", name] if not which else ["--estimate", ":".join((name, *which))]
    try:
        done = subprocess.run([sys.executable, os.path.abspath(__file__), *option], env=env,
                              capture_output=True, text=True, timeout=seconds)
    except subprocess.TimeoutExpired:
        return {"framework": name, "error": f"its process ran past {seconds} s and was stopped"}
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        return {"framework": name, "error": f"exit status {done.returncode}: {tail}"}


def _estimates(names: list, env: dict, seconds: int) -> dict:
    """{framework: its records} of each of `ESTIMATED`'s steps of `names`, estimated and measured
    each in a fresh interpreter (nothing allocated before it: JAX's peak cannot be reset), all at
    once: each reads its own process's allocator. JAX compiles without autotuning, whose buffers
    raise that lifetime peak before the step runs (on the H200, above every step measured here)."""
    jobs = [(name, model, batch, "") for name in names for model, batch in ESTIMATED.get(name, ())]
    jobs += [(name, model, batch, variant) for name in names for variant, steps in VARIANTS.get(name, {}).items()
             for model, batch in steps]
    no_autotune = {**env, "XLA_FLAGS": " ".join(filter(None, (env.get("XLA_FLAGS"), NO_AUTOTUNE)))}

    def one(job):
        name, model, batch, variant = job
        which = (model, str(batch), variant) if variant else (model, str(batch))
        child_env = variant_environment(no_autotune, variant) if name == "jax" else env
        record = _measure_in_child(name, child_env, seconds, *which)
        if "error" in record:
            return {"step": _estimate_step(model, batch, variant), "devshim": {}, "framework": {},
                    "source": "", "how": f"FAILED: {record['error']}", "failed": True}
        if name == "jax":
            settings = [f"{key}={value}" for key, value in sorted(child_env.items()) if no_autotune.get(key) != value]
            record["how"] += f" (XLA_FLAGS={NO_AUTOTUNE}{''.join(', ' + setting for setting in settings)})"
        return record

    found: dict = {name: [] for name in names}
    with concurrent.futures.ThreadPoolExecutor(max(1, len(jobs))) as pool:
        for (name, *_), record in zip(jobs, pool.map(one, jobs)):
            found[name].append(record)
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="comma-separated (default: all)")
    parser.add_argument("--json", metavar="FILE", help="also write the records as JSON")
    parser.add_argument("--write-estimates", metavar="FILE",
                        help="write the estimates and their measured peaks as the results file "
                             "docs/memory.md's table is made from (tools/gpu_estimates_results.json)")
    parser.add_argument("--preallocate", action="store_true",
                        help="leave JAX's and TensorFlow's preallocation as they are")
    parser.add_argument("--seconds", type=int, default=600, help="seconds each framework's process may take")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process's side
    parser.add_argument("--estimate", help=argparse.SUPPRESS)  # framework:model:batch[:variant], likewise
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one), default=str))
        return 0
    if args.estimate:
        name, model, batch, *variant = args.estimate.split(":")
        print(json.dumps(estimate_one(name, model, int(batch), *variant), default=str))
        return 0
    env = dict(os.environ)
    if not args.preallocate:
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    else:
        env["DEVSHIM_CHECK_PREALLOCATE"] = "1"
    env.pop("DEVSHIM_VIRTUAL_DEVICES", None)
    env.pop("DEVSHIM_DEVICE", None)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    results = []
    for name in [n.strip() for n in args.frameworks.split(",") if n.strip()]:
        if name not in SIDES:
            results.append({"framework": name, "skipped": f"unknown; known: {', '.join(FRAMEWORKS)}"})
        elif importlib.util.find_spec(name) is None:
            results.append({"framework": name, "skipped": f"{name} is not installed here"})
        else:
            results.append(_measure_in_child(name, env, args.seconds))
    measured = [result for result in results if "records" in result]
    estimates = _estimates([result["framework"] for result in measured], env, args.seconds)
    for result in measured:
        result["records"] += estimates[result["framework"]]
    status = report(results)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2, default=str)
    if args.write_estimates and estimate_rows(results):
        with open(args.write_estimates, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(estimates_document(results), indent=2) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())

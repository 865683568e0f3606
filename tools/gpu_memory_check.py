"""Compare ``ds.memory`` with each framework's own memory figures on a real GPU.

For each framework installed here (PyTorch, JAX, CuPy, TensorFlow, MXNet; absent ones are
skipped, saying so), a fresh interpreter makes a few allocations on GPU 0 and prints, after
each, what ``ds.memory("gpu:0")`` says beside what the framework itself says
(``torch.cuda.memory_allocated``/``memory_reserved``/``max_memory_allocated``/``mem_get_info``,
JAX's ``device.memory_stats()``, CuPy's memory pool and ``cudaMemGetInfo``, TensorFlow's
``get_memory_info``, MXNet's ``gpu_memory_info``), then what ``ds.memory_peak`` measures around
a temporary allocation, and whether devshim recognises the framework's own out-of-memory error.
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
import importlib.util
import json
import os
import subprocess
import sys

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


def _torch_step(batch: int, device):
    import torch

    net = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(device)
    optimizer = torch.optim.Adam(net.parameters())
    for _ in range(2):
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(net(torch.rand(batch, 784, device=device)),
                                          torch.randint(0, 10, (batch,), device=device)).backward()
        optimizer.step()


def _jax_step(params, x):
    import jax
    import jax.numpy as jnp

    def loss(params):
        return jnp.sum(jnp.tanh(x @ params[0]) @ params[1])

    grads = jax.grad(loss)(params)
    return [p - 0.01 * g for p, g in zip(params, grads)]


def _estimate(ds, name: str, device) -> dict:
    """ds.estimate_memory's figure for a training step beside the peak the GPU's allocator measures
    (where the framework can estimate: torch, an MLP with Adam; JAX, an MLP's SGD step)."""
    step = "estimate of a training step vs the measured peak"
    try:
        if name == "torch":
            found = ds.estimate_memory(_torch_step, 4096, ds.device(device, backend="torch"))
            with ds.memory_peak(device) as peak:
                _torch_step(4096, device)
            measured = peak.added
        else:
            import jax

            params = [jax.device_put(jax.numpy.ones(shape), device) for shape in ((784, 4096), (4096, 10))]
            x = jax.device_put(jax.numpy.ones((4096, 784)), device)
            found = ds.estimate_memory(_jax_step, params, x)
            jitted = jax.jit(_jax_step)
            jax.block_until_ready(jitted(params, x))
            with ds.memory_peak(device) as peak:
                jax.block_until_ready(jitted(params, x))
            measured = peak.added
    except (ds.MemoryEstimateUnsupportedError, ds.MemoryEstimateError) as error:
        return {"step": step, "devshim": {"estimate": None}, "framework": {"peak": str(error)[:120]}, "source": ""}
    above = found.peak - (found.details or {}).get("arguments", 0)
    return {"step": step, "devshim": {"estimate": above, "method": found.method[:40]},
            "framework": {"peak": measured, "peak method": peak.method}, "source": ""}


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
    if name in ("torch", "jax"):  # the frameworks ds.estimate_memory answers for
        records.append(_estimate(ds, name, gpu))
    return {"framework": name, "device": str(ds.memory(gpu).device), "records": records}


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
            status = 1 if wrong else status
            print(f"   {record['step']:<40} {shown}" + (f"   DIFFERS: {', '.join(wrong)}" if wrong else ""))
    return status if ran or status else 2


def _measure_in_child(name: str, env: dict, seconds: int) -> dict:
    """`run_one(name)` in a fresh interpreter: its records, or an error saying how it failed."""
    try:
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", name], env=env,
                              capture_output=True, text=True, timeout=seconds)
    except subprocess.TimeoutExpired:
        return {"framework": name, "error": f"its process ran past {seconds} s and was stopped"}
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        return {"framework": name, "error": f"exit status {done.returncode}: {tail}"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="comma-separated (default: all)")
    parser.add_argument("--json", metavar="FILE", help="also write the records as JSON")
    parser.add_argument("--preallocate", action="store_true",
                        help="leave JAX's and TensorFlow's preallocation as they are")
    parser.add_argument("--seconds", type=int, default=600, help="seconds each framework's process may take")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process's side
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one), default=str))
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
    status = report(results)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2, default=str)
    return status


if __name__ == "__main__":
    sys.exit(main())

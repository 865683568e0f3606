"""D2L "GPUs", exercise 3: log a result to the host every step, or keep the log on the device.

1000 multiplications of 100x100 matrices, logging the Frobenius norm of each product:

- the usual mistake: ``log.append(float(norm))`` every step, which copies one number to the host
  and makes Python wait for the device each time;
- the fix: keep the norms on the device and move the whole log once, explicitly.

A ``ds.transfer_guard("log")`` block counts the implicit copies to the host the first loop makes
(on a GPU, real or virtual; on the CPU there is nothing to copy), and ``ds.Timer`` times both.
``devshim bench logging`` measures the same thing with repeated runs and spreads.

    python examples/logging_on_gpu.py
    DEVSHIM_VIRTUAL_DEVICES=2 DEVSHIM_BACKEND=tensorflow python examples/logging_on_gpu.py
"""

import argparse
import contextlib
import warnings

import numpy as np

import devshim as ds
from devshim.backends import specs

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=1000, help="matrix products to log (default 1000)")
steps = parser.parse_args().steps

backend = ds.get_backend().name
device = ds.try_gpu()
rng = np.random.default_rng(0)
A, B = (rng.standard_normal((100, 100)).astype(np.float32) / 10 for _ in range(2))

# The framework's own call to put the two matrices on the device.
if backend == "torch":
    import torch

    a, b = (torch.from_numpy(m).to(device) for m in (A, B))
elif backend == "tensorflow":
    import tensorflow as tf

    with device:
        a, b = (tf.identity(tf.constant(m)) for m in (A, B))
elif backend == "jax":
    import jax

    a, b = (jax.device_put(m, device) for m in (A, B))
elif backend == "mxnet":
    import mxnet as mx

    mx.npx.set_np()  # NumPy semantics (0-d results), as D2L runs MXNet

    a, b = (mx.np.array(m, ctx=device) for m in (A, B))
elif backend == "cupy":
    import cupy

    with device:
        a, b = (cupy.asarray(m) for m in (A, B))
else:
    a, b = A, B

xp = ds.array_module(a)  # the same NumPy-like code for every framework
scope = ds.neutral_device(a).native if backend in ("tensorflow", "cupy") else contextlib.nullcontext()


def norm_of_product():
    with scope:
        c = xp.matmul(a, b)
        return xp.sqrt(xp.sum(c * c))  # the Frobenius norm, left on the device


norm_of_product()  # warm up
timer = ds.Timer(device)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", ds.ImplicitTransferWarning)
    with ds.transfer_guard("log") as report:  # count the copies nobody asked for
        timer.start()
        log_each_step = [float(norm_of_product()) for _ in range(steps)]  # float(): a host copy per step
        each_step = timer.stop()

with ds.transfer_guard("disallow") as strict:  # the fix needs no implicit copy at all
    timer.start()
    on_device = [norm_of_product() for _ in range(steps)]
    with scope:
        log_once = ds.to_numpy(xp.stack(on_device))  # one explicit copy of the whole log
    once = timer.stop()

assert strict.total == 0
np.testing.assert_allclose(log_once, log_each_step, rtol=1e-5)
where = ds.neutral_device(on_device[0])
print(f"{backend}: {steps} products of 100x100 matrices on {where}, logging the norm of each")
if where.kind == "cpu":
    seen = " (none: the CPU is the host)"
elif not specs()[backend].capabilities()["guard"]:  # CuPy: float() copies all the same, unwatched
    seen = f" counted: ds.transfer_guard does not watch {ds.get_backend().spec.title}'s host reads"
else:
    seen = ""
print(f"{backend}: logged to the host every step: {each_step:.3f} s, {report.total} implicit copies "
      f"to the host{seen}")
print(f"{backend}: logged on the device, moved once: {once:.3f} s, 1 explicit copy (ds.to_numpy)")
print(f"{backend}: both logs hold the same {len(log_once)} norms, e.g. {log_once[0]:.4f}")
if where.kind == "gpu" and not where.virtual:
    print(f"{backend}: keeping the log on the GPU took {once / each_step:.0%} of the time of logging each step")
else:
    print(f"{backend}: on the {'CPU' if where.kind == 'cpu' else 'virtual GPU (the CPU)'} nothing waits for a "
          f"device, so the two times say little; on a GPU each float() stalls it until its queue drains")

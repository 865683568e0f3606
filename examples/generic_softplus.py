"""CPU/GPU generic code with ds.array_module, ported from Chainer's softplus.

    xp = ds.array_module(x)    # numpy, cupy, jax.numpy, torch's or TensorFlow's NumPy API

The same function runs on whatever array it is given, on whatever device that array lives.
Run it as a script to try it on every framework installed here.
"""

from __future__ import annotations

import numpy as np

import devshim as ds


def softplus(x):
    """log(1 + exp(x)), computed stably (exp never overflows) with x's own array module."""
    xp = ds.array_module(x)
    return xp.maximum(0, x) + xp.log1p(xp.exp(-abs(x)))


def arrays_of_installed_frameworks(values):
    """``values`` as an array of each installed framework (on its try_gpu()): name -> array."""
    arrays = {"numpy": np.asarray(values)}
    available = ds.available_backends()
    if "torch" in available:
        import torch

        arrays["torch"] = torch.tensor(values, device=ds.try_gpu(backend="torch"))
    if "jax" in available:
        import jax

        arrays["jax"] = jax.device_put(np.asarray(values), ds.try_gpu(backend="jax"))
    if "tensorflow" in available:
        import tensorflow as tf

        with ds.try_gpu(backend="tensorflow"):
            arrays["tensorflow"] = tf.constant(values)
    if "mxnet" in available:
        import mxnet as mx

        arrays["mxnet"] = mx.np.array(values, ctx=ds.try_gpu(backend="mxnet"))
    if "cupy" in available and ds.num_gpus(backend="cupy"):
        import cupy

        with ds.try_gpu(backend="cupy"):
            arrays["cupy"] = cupy.asarray(values)
    return arrays


def main() -> None:
    values = [-1000.0, -1.0, 0.0, 1.0, 1000.0]
    expected = np.logaddexp(0.0, values)  # NumPy's own log(exp(0) + exp(x))
    for name, x in arrays_of_installed_frameworks(values).items():
        y = softplus(x)
        np.testing.assert_allclose(ds.to_numpy(y), expected, rtol=1e-6)
        shown = np.array2string(ds.to_numpy(y), precision=4, floatmode="fixed")
        print(f"{name:<11} xp = {ds.array_module(x).__name__:<32} on {ds.neutral_device(y)}: {shown}")


if __name__ == "__main__":
    main()

"""A framework's own refusal to combine tensors on different devices leaves a checking
ds.transfer_guard block ("log" or "disallow") as ds.DeviceMismatchError, with the framework's
message in it and the framework's error as its cause; outside a block it stays the framework's.

JAX (its ValueError "Received incompatible devices for jitted computation") and TensorFlow (an
op under the "explicit" device policy) need two devices of their own: they run in a fresh
interpreter with two host devices, in every tox pass. PyTorch (a CPU tensor with a meta one)
and MXNet (a hybridized block's inputs in two contexts) run here."""

from __future__ import annotations

import importlib.util

import pytest

import devshim as ds
from helpers import last_json_lines, start_python

LEVELS = ("log", "disallow")


def installed(name: str):
    return pytest.mark.skipif(importlib.util.find_spec(name) is None, reason=f"{name} is not installed here")


def check(refused_outside: BaseException, refusals: dict) -> None:
    """``refusals``: level -> the error that left a block of that level."""
    assert not isinstance(refused_outside, ds.DevshimError)
    for level, error in refusals.items():
        assert isinstance(error, ds.DeviceMismatchError), (level, error)
        assert str(refused_outside) in str(error) and "ds.copy_if_needed" in str(error)
        assert type(error.__cause__) is type(refused_outside)


def refusals(make_the_call) -> dict:
    found = {}
    for level in LEVELS:
        with pytest.raises(Exception) as left:  # noqa: PT011 - which class is what is checked
            with ds.transfer_guard(level):
                make_the_call()
        found[level] = left.value
    return found


@installed("torch")
def test_torch_refusing_a_cpu_and_a_meta_tensor_leaves_a_block_as_device_mismatch():
    import torch

    a, b = torch.ones(2), torch.ones(2, device="meta")
    with ds.use_backend("torch"):
        with pytest.raises(RuntimeError) as outside:
            torch.cat([a, b])
        check(outside.value, refusals(lambda: torch.cat([a, b])))


@installed("mxnet")
def test_mxnet_refusing_a_hybridized_blocks_inputs_in_two_contexts_leaves_a_block_as_device_mismatch():
    import mxnet as mx
    from mxnet import gluon, npx

    npx.set_np()
    net = gluon.nn.Dense(2, in_units=2)
    net.initialize(ctx=mx.cpu(0))
    net.hybridize()
    x = mx.np.ones((1, 2), ctx=mx.cpu(1))

    def call():
        net(x).wait_to_read()

    with ds.use_backend("mxnet"):
        with pytest.raises(mx.base.MXNetError) as outside:
            call()
        assert "same context" in str(outside.value)
        check(outside.value, refusals(call))


# A fresh interpreter with two devices of the framework's own: each prints what left a call
# outside any block and inside a block of each level.
REFUSALS = """
import json
import devshim as ds

def left(call, level=None):
    try:
        if level is None:
            call()
        else:
            with ds.transfer_guard(level):
                call()
    except Exception as err:
        cause = err.__cause__
        return {"type": type(err).__name__, "message": str(err), "devshim": isinstance(err, ds.DevshimError),
                "mismatch": isinstance(err, ds.DeviceMismatchError),
                "cause": type(cause).__name__ if cause is not None else None}
    return None

call = CALL
print(json.dumps({str(level): left(call, level) for level in (None, "log", "disallow")}))
"""

JAX_CALL = """
import warnings
import jax, jax.numpy as jnp
warnings.simplefilter("ignore", ds.ImplicitTransferWarning)
with ds.use_backend("jax"):
    gpus = ds.try_all_gpus()  # devshim first: it sets up the virtual GPUs before JAX starts
    a = jax.device_put(jnp.ones(2), gpus[0])
    b = jax.device_put(jnp.ones(2), gpus[1])
def call():
    a + b
"""

TF_CALL = """
import warnings
import tensorflow as tf
warnings.simplefilter("ignore", ds.ImplicitTransferWarning)
ds.set_backend("tensorflow")
with ds.try_gpu(0):
    a = tf.ones(2)
with ds.try_gpu(1):
    b = tf.ones(2)
def call():
    tf.config.experimental.set_device_policy("explicit")  # the user's choice: TensorFlow refuses
    try:
        with ds.try_gpu(1):
            a + b
    finally:
        tf.config.experimental.set_device_policy(None)
"""


def run_refusals(setup: str, backend: str) -> dict:
    code = REFUSALS.replace("call = CALL", setup)
    (seen,) = last_json_lines([start_python(code, DEVSHIM_BACKEND=backend, DEVSHIM_VIRTUAL_DEVICES="2")])
    return seen


def check_fresh(seen: dict, native: str, phrase: str, mismatch_at: tuple) -> None:
    outside = seen["None"]
    assert outside["type"] == native and not outside["devshim"] and phrase in outside["message"]
    for level in mismatch_at:
        inside = seen[level]
        assert inside["mismatch"] and inside["cause"] == native, (level, inside)
        assert outside["message"] in inside["message"]


@installed("jax")
def test_jax_refusing_arrays_committed_to_two_devices_leaves_a_block_as_device_mismatch():
    seen = run_refusals(JAX_CALL, "jax")
    check_fresh(seen, "ValueError", "Received incompatible devices for jitted computation", LEVELS)
    assert "gpu:0, gpu:1" in seen["disallow"]["message"]  # devshim's names for JAX's device ids


@installed("tensorflow")
def test_tensorflow_refusing_inputs_on_two_devices_leaves_a_block_as_device_mismatch():
    seen = run_refusals(TF_CALL, "tensorflow")
    # Under "disallow" devshim's own check refuses the copy first (its message, no cause); under
    # "log" devshim only records it and TensorFlow's refusal is what leaves the block.
    check_fresh(seen, "InvalidArgumentError", "Tensors on conflicting devices", ("log",))
    assert seen["disallow"]["mismatch"]

"""Issue 19: the guard's remaining holes, closed (each needs two devices: the virtual tox pass).

TensorFlow ops with one tensor input (``tf.exp(x)``, ``x * 2``, a variable times a
number) under another device's scope; MXNet advanced indexing with an index array on
another context (``mx.np`` and ``mx.nd``) and ``np.tensordot``, which MXNet 1.9 runs
through its packed-function interface.
"""

from __future__ import annotations

import pytest

import devshim as ds


def _two_gpus(backend: str):
    if ds.num_gpus(backend=backend) < 2:
        pytest.skip(f"needs two GPUs on {backend}, real or virtual (DEVSHIM_VIRTUAL_DEVICES=2)")
    return ds.gpu(0, backend=backend), ds.gpu(1, backend=backend)


@pytest.mark.parametrize("op", ["tf.exp(x)", "x * 2", "v * 2"])
def test_tensorflow_one_input_ops_on_another_device_are_refused(op):
    tf = pytest.importorskip("tensorflow")
    g0, g1 = _two_gpus("tensorflow")
    with tf.device(g0.name):
        x = tf.constant([1.0, 2.0])
        v = tf.Variable([1.0, 2.0])
    run = {"tf.exp(x)": lambda: tf.exp(x), "x * 2": lambda: x * 2, "v * 2": lambda: v * 2}[op]
    with tf.device(g1.name):
        with ds.transfer_guard("disallow") as report:
            with pytest.raises(ds.DeviceMismatchError, match="ds.copy_if_needed"):
                run()
        assert report.total == 1
        with ds.transfer_guard("log") as report:
            result = run()
        assert report.total == 1 and ds.device_of(result) == ds.device_of(tf.identity(result))
    with tf.device(g0.name), ds.transfer_guard("disallow") as report:
        run()  # where its input is: nothing moves
    assert report.total == 0


def _mx_arrays(front: str):
    mx = pytest.importorskip("mxnet")
    g0, g1 = _two_gpus("mxnet")
    module = mx.np if front == "np" else mx.nd
    A = module.ones((4, 3), ctx=g0)
    idx = module.array([0, 2], ctx=g1, dtype="int64")
    return mx, g0, g1, A, idx


@pytest.mark.parametrize("front", ["np", "nd"])
@pytest.mark.parametrize("index", ["A[I]", "A[I, 0]"])
def test_mxnet_advanced_indexing_with_an_index_on_another_context_is_refused(front, index):
    mx, g0, g1, A, idx = _mx_arrays(front)
    run = {"A[I]": lambda: A[idx], "A[I, 0]": lambda: A[idx, 0]}[index]
    with ds.transfer_guard("disallow") as report:
        with pytest.raises(ds.DeviceMismatchError, match="indexing"):
            run()
    assert report.total == 1
    here = idx.as_in_context(g0) if front == "nd" else idx.as_in_ctx(g0)
    with ds.transfer_guard("disallow") as report:
        A[here]  # the index where A is: nothing moves
    assert report.total == 0


def test_mxnet_tensordot_across_contexts_is_refused():
    mx = pytest.importorskip("mxnet")
    g0, g1 = _two_gpus("mxnet")
    a, b = mx.np.ones((2, 3), ctx=g0), mx.np.ones((3, 2), ctx=g1)
    with ds.transfer_guard("disallow") as report:
        with pytest.raises(ds.DeviceMismatchError, match="tensordot"):
            mx.np.tensordot(a, b, axes=1)
        mx.np.tensordot(a, b.as_in_ctx(g0), axes=1)  # same context: fine
    assert report.total == 1
    with ds.transfer_guard("allow"):
        assert mx.np.tensordot(a, b, axes=1).shape == (2, 2)

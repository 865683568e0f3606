"""The private MXNet names the mxnet backend uses, each behind a probe (`devshim.backends.probes`).

The backend's modules ask these probes and name no internal themselves. Each probe says
which feature needs the name and what that feature does without it; on a release that
moved one, its first use issues one `FrameworkInternalWarning`. MXNet 1.9.1 is its last
release, so these are not expected to move; the canary tests (`tests/test_internals.py`)
check them all the same.

The transfer guard's (`guard.py`) are the Python functions MXNet's generated operators call
(`_imperative_invoke`, the packed functions of `mx.np`) and the conversion of index arrays.
"""

from __future__ import annotations

from devshim.backends.probes import Internals, Slot, dotted, slot

#: The MXNet release devshim's CI tests (tox env mxnet): 1.9.1, the last one.
TESTED = "1.9.1"

INTERNALS = Internals("mxnet", title="MXNet", tested=TESTED)


def _deferred_init():
    from mxnet import gluon

    parameter = gluon.Parameter("probe", shape=(1,))
    parameter._deferred_init  # noqa: B018 - () until initialize() defers for want of a shape
    return "_deferred_init"


def _children():
    from mxnet import gluon

    if not isinstance(gluon.Block()._children, dict):
        raise TypeError("gluon.Block._children is no longer a dict")
    return "_children"


def _numpy_packed_functions():
    from mxnet.ndarray.numpy import _api_internal

    if not any(callable(fn) for name, fn in vars(_api_internal).items() if not name.startswith("__")):
        raise AttributeError("mxnet.ndarray.numpy._api_internal holds no function")
    return _api_internal


def _index_to_array():
    import mxnet as mx

    if not isinstance(vars(mx.nd.NDArray)["_advanced_index_to_array"], staticmethod):
        raise TypeError("mxnet NDArray._advanced_index_to_array is no longer a staticmethod")
    return Slot(mx.nd.NDArray, "_advanced_index_to_array")


_OPS = "the transfer guard's checks of op inputs on different contexts (cpu(0) + cpu(1), gpu(0) + gpu(1))"

IMPERATIVE_INVOKE = INTERNALS.add(
    "mxnet.ndarray.register._imperative_invoke",
    feature=_OPS + " in the mx.nd and mx.np operators",
    fallback="such ops run on the first input's context without a word (host reads are still checked).",
    find=slot("mxnet.ndarray.register._imperative_invoke"),  # what every generated operator calls
)
NUMPY_PACKED_FUNCTIONS = INTERNALS.add(
    "mxnet.ndarray.numpy._api_internal",
    feature=_OPS + " in the mx.np operators called as packed functions (np.tensordot, np.zeros, ...)",
    fallback="those operators are not checked (the other mx.np and mx.nd operators still are).",
    find=_numpy_packed_functions,
)
INDEX_TO_ARRAY = INTERNALS.add(
    "mxnet.ndarray.NDArray._advanced_index_to_array",
    feature="the transfer guard's check of advanced indexing (A[I]) with an index array on another context",
    fallback="such an index array is copied to A's context without a word.",
    find=_index_to_array,
)
NDARRAY_GET_DATA = INTERNALS.add(
    "mxnet.base._LIB.MXNDArrayGetData",
    feature="reading an array's data address (ds.convert's check that a no-copy conversion shares memory)",
    fallback="the address is unknown, so ds.convert cannot check that a DLPack import from MXNet shared "
             "its memory rather than copied it (the result is right either way).",
    find=dotted("mxnet.base._LIB.MXNDArrayGetData"),
)
DEFERRED_INIT = INTERNALS.add(
    "mxnet.gluon.Parameter._deferred_init",
    feature="ds.place_model of a Gluon block whose parameters wait for their shapes",
    fallback="such a block is initialised on the device rather than moved: run one forward pass first.",
    find=_deferred_init,
)
CHILDREN = INTERNALS.add(
    "mxnet.gluon.Block._children",
    feature="ds.place_model(net, 'balanced')'s sizes of a block's children",
    fallback="the block reports no children ('balanced' is refused on MXNet either way).",
    find=_children,
)

__all__ = ["INTERNALS", "TESTED", "IMPERATIVE_INVOKE", "NUMPY_PACKED_FUNCTIONS", "INDEX_TO_ARRAY",
           "NDARRAY_GET_DATA", "DEFERRED_INIT", "CHILDREN"]

"""The private MXNet names the mxnet backend uses, each behind a probe (``devshim.backends.probes``).

The backend's modules ask these probes and name no internal themselves. Each probe says
which feature needs the name and what that feature does without it; on a release that
moved one, its first use issues one ``FrameworkInternalWarning``. MXNet 1.9.1 is its last
release, so these are not expected to move; the canary tests (``tests/test_internals.py``)
check them all the same.

To move here in round two (issue 27; still used where they are):

========  ====  ====================================================  ==========================
file      line  name                                                  feature
========  ====  ====================================================  ==========================
guard.py  28    mxnet.ndarray.register._imperative_invoke (wrapped)   transfer guard: ops
guard.py  29    mxnet.ndarray.numpy._api_internal                     transfer guard: np ops
guard.py  155   NDArray._advanced_index_to_array (wrapped)            transfer guard: indexing
========  ====  ====================================================  ==========================
"""

from __future__ import annotations

from devshim.backends.probes import Internals

#: The MXNet release devshim's CI tests (tox env mxnet): 1.9.1, the last one.
TESTED = "1.9.1"

INTERNALS = Internals("mxnet", title="MXNet", tested=TESTED)


def _ndarray_get_data():
    import mxnet as mx

    return mx.base._LIB.MXNDArrayGetData


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


NDARRAY_GET_DATA = INTERNALS.add(
    "mxnet.base._LIB.MXNDArrayGetData",
    feature="reading an array's data address (ds.convert's check that a no-copy conversion shares memory)",
    fallback="the address is unknown, so ds.convert cannot check that a DLPack import from MXNet shared "
             "its memory rather than copied it (the result is right either way).",
    find=_ndarray_get_data,
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

__all__ = ["INTERNALS", "TESTED", "NDARRAY_GET_DATA", "DEFERRED_INIT", "CHILDREN"]

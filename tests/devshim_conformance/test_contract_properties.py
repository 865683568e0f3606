"""Property tests: copies are bit-exact, keep dtype and shape, and never alias the source."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes

import devshim as ds

ITEMSIZE = {
    "bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint16": 2,
    "uint32": 4, "uint64": 8, "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8,
    "complex64": 8, "complex128": 16,
}

PROPERTY_SETTINGS = settings(
    max_examples=60, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@st.composite
def raw_tensors(draw, dtypes):
    """(dtype, shape, raw bytes): every bit pattern, NaN payloads and -0.0 included."""
    dtype = draw(st.sampled_from(dtypes))
    shape = draw(array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
    count = math.prod(shape)
    if dtype == "bool":
        raw = bytes(draw(st.lists(st.integers(0, 1), min_size=count, max_size=count)))
    else:
        size = count * ITEMSIZE[dtype]
        raw = draw(st.binary(min_size=size, max_size=size))
    strided = draw(st.booleans())
    return dtype, shape, raw, strided


def _check_round_trip(harness, dtype, shape, raw, strided):
    x = harness.from_bits(raw, shape, dtype, device=ds.cpu())
    if strided:
        x = harness.strided(x)
    expected_bits = harness.bits(x)
    for target in ds.devices():
        there = ds.to_device(x, target)
        back = ds.copy_if_needed(there, ds.cpu())
        for y in (there, back):
            assert harness.dtype_name(y) == dtype
            assert harness.shape(y) == harness.shape(x)
            assert harness.bits(y) == expected_bits
        assert not harness.aliases(there, x)
    again = ds.to_device(x, ds.cpu())
    assert not harness.aliases(again, x)
    assert harness.bits(x) == expected_bits


def test_round_trips_are_bit_exact_for_every_dtype(harness):
    @PROPERTY_SETTINGS
    @given(raw_tensors(harness.dtypes))
    def check(case):
        _check_round_trip(harness, *case)

    check()


def test_round_trips_cover_each_dtype_at_least_once(harness):
    """Hypothesis picks dtypes at random; make sure none is left out."""
    for dtype in harness.dtypes:
        raw = bytes([1] * 6) if dtype == "bool" else bytes(range(6 * ITEMSIZE[dtype]))
        _check_round_trip(harness, dtype, (2, 3), raw, True)
        _check_round_trip(harness, dtype, (), raw[: ITEMSIZE[dtype]], False)
        _check_round_trip(harness, dtype, (0, 2), b"", False)


def test_to_numpy_is_exact_for_numpy_dtypes(harness):
    for dtype in harness.dtypes:
        if dtype == "bfloat16":
            continue
        raw = bytes([1] * 6) if dtype == "bool" else bytes(range(6 * ITEMSIZE[dtype]))
        host = ds.to_numpy(harness.from_bits(raw, (2, 3), dtype))
        assert host.dtype == np.dtype(dtype)
        assert host.tobytes() == raw

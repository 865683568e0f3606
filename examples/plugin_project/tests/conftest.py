"""The tests' one fixture: an array of the test's backend on a device, whatever the backend."""

import numpy as np
import pytest

import devshim as ds


@pytest.fixture
def array(ds_backend):
    """``array(values, device)``: ``values`` as an array of the test's backend on ``device``
    (``ds.convert`` makes it the framework's own way: one copy from the host, explicit)."""
    return lambda values, device: ds.convert(np.asarray(values, dtype=np.float32), ds_backend, device=device)

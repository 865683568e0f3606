"""rowstats' tests, run on every backend by devshim's pytest plugin:

    pytest --devshim-backend all                              # each installed framework
    pytest --devshim-backend all --devshim-virtual-devices 2  # and on two virtual GPUs
"""

import numpy as np
import pytest

import devshim as ds
from rowstats import sum_of_squares

ROWS = np.arange(12, dtype=np.float32).reshape(6, 2) / 4
EXPECTED = float(np.sum(ROWS * ROWS))


def test_on_one_device(ds_backend, ds_device, array):
    X = array(ROWS, ds_device)
    result = sum_of_squares(X)
    assert ds.device_of(result) == ds.device_of(X)
    assert float(ds.to_numpy(result)) == pytest.approx(EXPECTED)


@pytest.mark.gpus(2)
@pytest.mark.transfer_guard("disallow")     # every copy between the GPUs must be explicit
def test_split_over_two_gpus(ds_devices, array):
    X = array(ROWS, ds_devices[0])
    result = sum_of_squares(X, ds_devices[:2])
    assert ds.device_of(result) == ds.device_of(X)
    assert float(ds.to_numpy(result)) == pytest.approx(EXPECTED)


@pytest.mark.backends("torch")              # autograd, the PyTorch way
def test_gradients_flow_back_across_the_split(ds_devices):
    import torch

    X = torch.tensor(ROWS, device=ds_devices[0], requires_grad=True)
    sum_of_squares(X, ds_devices).backward()
    assert np.allclose(ds.to_numpy(X.grad), 2 * ROWS)

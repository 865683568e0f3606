"""The D2L "GPUs" chapter, PyTorch flavour, written with devshim.

Runs unchanged on a machine with zero, one or two GPUs:

    python examples/d2l_gpus_torch.py
    DEVSHIM_DEVICE=cpu python examples/d2l_gpus_torch.py   # pretend there is no GPU
    DEVSHIM_VIRTUAL_DEVICES=2 python examples/d2l_gpus_torch.py   # two virtual GPUs (vgpu:0, vgpu:1)
"""

import torch
from torch import nn

import devshim as ds

ds.set_backend("torch")
print("devices:", ds.devices(), "| try_gpu(10):", ds.try_gpu(10), "| all:", ds.try_all_gpus())

# Storage on the GPU (or the CPU when there is none).
X = torch.ones(2, 3, device=ds.try_gpu())
Y = torch.rand(2, 3, device=ds.try_gpu(1))
print("X on", ds.device_of(X), "| Y on", ds.device_of(Y))

# Copying: explicit, always new storage.
Z = ds.to_device(X, ds.try_gpu(1))
print("Y + Z =", Y + Z)

# Already there: no copy, no new memory.
assert ds.copy_if_needed(Z, ds.try_gpu(1)) is Z

# Mixing devices is caught before the framework's error (or silent copy) happens.
if not ds.same_device(X, Y):
    try:
        ds.ensure_same_device(X, Y)
    except ds.DeviceMismatchError as err:
        print("caught:", err)

# Neural networks: parameters and inputs on the same device.
net = nn.Sequential(nn.Linear(3, 1)).to(ds.try_gpu())
print("output:", ds.to_numpy(net(X)).ravel(), "| weight on", ds.device_of(net[0].weight))
assert ds.same_device(net[0].weight, X)

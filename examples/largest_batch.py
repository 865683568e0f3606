"""Will it fit? The largest training batch for a given GPU size, found on a CPU.

D2L's "GPUs" chapter warns that code must not create data beyond the GPU's memory. With
devshim's virtual GPUs and a size for them (``DEVSHIM_VIRTUAL_MEMORY``, here ``--size``), a
PyTorch virtual GPU refuses an allocation past its size with torch's own
``torch.OutOfMemoryError``, as a GPU of that size would: so the largest batch that fits is
found by trying, on any machine. The model is D2L's MLP for Fashion-MNIST (784 -> 256 -> 10)
trained with Adam: its parameters, their gradients and Adam's two moments stay on the GPU
between steps; a batch adds its inputs and activations. ``ds.memory`` shows what is in use,
``ds.memory_peak`` the most a step took.

    python examples/largest_batch.py                      # a virtual GPU of 64 MiB
    python examples/largest_batch.py --size 1GiB --hidden 4096
    DEVSHIM_VIRTUAL_MEMORY=16GiB python examples/largest_batch.py   # needs 16 GiB of host memory

The virtual GPU's tensors live in host memory: the host needs as much as the size asked for.
"""

import argparse

import devshim as ds

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--size", default=None, help="the virtual GPU's size (default: DEVSHIM_VIRTUAL_MEMORY, else 64MiB)")
parser.add_argument("--hidden", type=int, default=256, help="the MLP's hidden units (default 256)")
args = parser.parse_args()

# One virtual GPU of the size asked for (before torch first touches its devices).
ds.testing.virtual_devices(1)
if args.size is not None or ds.settings.virtual_memory() is None:
    ds.settings.set_virtual_memory(args.size or "64MiB")
size = ds.settings.virtual_memory()

import torch  # noqa: E402
from torch import nn  # noqa: E402

ds.set_backend("torch")
device = ds.gpu(0)
torch.manual_seed(0)
net = ds.place_model(nn.Sequential(nn.Flatten(), nn.Linear(784, args.hidden), nn.ReLU(),
                                   nn.Linear(args.hidden, 10)), device)
optimizer = torch.optim.Adam(net.parameters())
loss = nn.CrossEntropyLoss()
parameters = sum(p.nbytes for p in net.parameters())


def step(batch: int) -> None:
    """One training step on a batch of random Fashion-MNIST-shaped images."""
    X = ds.to_device(torch.rand(batch, 1, 28, 28), device)
    y = ds.to_device(torch.randint(0, 10, (batch,)), device)
    optimizer.zero_grad(set_to_none=True)
    loss(net(X), y).backward()
    optimizer.step()


def fits(batch: int) -> bool:
    try:
        step(batch)
    except (torch.OutOfMemoryError, ds.DeviceOutOfMemoryError):  # torch's own, or devshim's from to_device
        return False
    return True


def mib(count: int) -> str:
    return f"{count / 2**20:.2f} MiB"


step(1)  # the first step makes what every step keeps: gradients and Adam's moments
kept = ds.memory(device).in_use
print(f"virtual GPU gpu:0 of {mib(size)}; the model's parameters take {mib(parameters)}")
print(f"kept between steps: {mib(kept)} (parameters, gradients, Adam's two moments: 4 x {mib(parameters)})")

low, high = 1, 2
while fits(high):  # double until a batch does not fit ...
    low, high = high, high * 2
while high - low > 1:  # ... then halve the gap
    middle = (low + high) // 2
    low, high = (middle, high) if fits(middle) else (low, middle)

with ds.memory_peak(device) as peak:
    step(low)
print(f"largest batch that fits: {low} (a step takes {mib(peak.added)} more at most, "
      f"{peak.added / low / 1024:.1f} KiB per example: {mib(peak.peak)} of {mib(size)})")
try:
    step(low + 1)
except (torch.OutOfMemoryError, ds.DeviceOutOfMemoryError) as error:
    print(f"batch {low + 1} does not fit: {type(error).__name__}: {str(error).splitlines()[0][:100]}...")
print(f"ds.memory('gpu:0'): {ds.memory(device)}")

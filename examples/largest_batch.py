"""Will it fit? The largest training batch for a GPU of a given size, planned on a CPU.

D2L's "GPUs" chapter warns that code must not create data beyond the GPU's memory. devshim
answers without the GPU and without its memory: ``ds.largest_batch`` estimates a training
step at each batch size it tries (``ds.estimate_memory``: PyTorch runs the step under its
``FakeTensorMode``, on tensors that have shapes and no memory, and devshim counts every
storage it makes), doubling, then bisecting. The model is D2L's MLP for Fashion-MNIST
(784 -> hidden -> 10) trained with Adam: its parameters, their gradients and Adam's two moments
stay between steps; a batch adds its inputs and activations.

Then, where the planned GPU is small enough for this machine, the answer is checked by trying:
on a PyTorch virtual GPU of that size (``DEVSHIM_VIRTUAL_MEMORY``), the batch found fits, one
more does not, and ``ds.memory_peak`` measures what the estimate said.

    python examples/largest_batch.py                          # a GPU of 64 MiB: planned, then tried
    python examples/largest_batch.py --size 80GB --hidden 16384   # planned only: in seconds, on any machine
"""

import argparse

import devshim as ds

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--size", default="64MiB", help="the GPU's size (default 64MiB)")
parser.add_argument("--hidden", type=int, default=256, help="the MLP's hidden units (default 256)")
parser.add_argument("--try-up-to", default="1GiB",
                    help="check on a virtual GPU when the size is at most this (default 1GiB; the host holds it)")
args = parser.parse_args()
size = ds.settings.parse_size(args.size, source="--size")

# One virtual GPU of the size, for the check (before torch first touches its devices).
ds.testing.virtual_devices(1)
import torch  # noqa: E402
from torch import nn  # noqa: E402

ds.set_backend("torch")


def train(batch: int, device="cpu", steps: int = 2):
    """Two training steps (the second has Adam's state: the steady state) on random
    Fashion-MNIST-shaped images; the model and the optimiser are made here, on `device`."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)).to(device)
    # foreach=True: Adam's path on a GPU (CUDA's default, and a virtual GPU's), planned on the CPU too.
    optimizer = torch.optim.Adam(net.parameters(), foreach=True)
    loss = nn.CrossEntropyLoss()
    for _ in range(steps):
        X = torch.rand(batch, 1, 28, 28, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        optimizer.zero_grad(set_to_none=True)
        loss(net(X), y).backward()
        optimizer.step()


def mib(count: int) -> str:
    return f"{count / 2**20:.2f} MiB"


found = ds.largest_batch(train, size)  # each estimate is reported on stderr
print(f"a GPU of {mib(size)}: the largest batch that fits is {found.batch}, planned in {len(found.tried)} "
      f"estimates ({found.estimate})")
if found.batch == 0 or size > ds.settings.parse_size(args.try_up_to, source="--try-up-to"):
    raise SystemExit(0)

# The check: on a virtual GPU of that size, the batch found fits and one more does not.
ds.settings.set_virtual_memory(size)
device = ds.gpu(0)
with ds.memory_peak(device) as peak:
    train(found.batch, device)
print(f"on a virtual GPU of {mib(size)}: batch {found.batch} fits, its peak {mib(peak.peak)} "
      f"(estimated {mib(found.estimate.peak)})")
try:
    train(found.batch + 1, device)
except (torch.OutOfMemoryError, ds.DeviceOutOfMemoryError) as error:
    print(f"batch {found.batch + 1} does not fit: {type(error).__name__}: {str(error).splitlines()[0][:100]}...")

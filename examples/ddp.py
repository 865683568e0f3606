"""Data-parallel training over processes: PyTorch's DistributedDataParallel, placed with devshim.

One process per device. Each takes its own device (ds.try_gpu() is local rank % GPUs under
a launcher), joins the process group (ds.init_distributed(): nccl on GPUs, gloo on the CPU),
places its replica with ds.place_model, wraps it in DDP, and trains on its share of every
batch (a DistributedSampler). The same script runs as one process, without a launcher.

    python examples/ddp.py                                  # one process
    torchrun --nproc_per_node 2 examples/ddp.py              # two: two GPUs, or the CPU twice
    srun --ntasks-per-node 4 python examples/ddp.py          # Slurm: export MASTER_ADDR/MASTER_PORT

It checks what DDP promises: after one step every rank holds the same weights (compared
across processes with ds.allreduce), equal to one step on the whole batch in one process.
"""

import copy
import gc

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import devshim as ds

PER_RANK, EPOCHS, LR = 8, 3, 0.05


def train_step(model, optimizer, X, y):
    optimizer.zero_grad()
    loss = ((model(X) - y) ** 2).mean()
    loss.backward()  # under DDP, the gradients are averaged over the ranks here
    optimizer.step()
    return loss.detach()


def weights(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


info = ds.init_distributed()  # reads the launcher's variables; a world of one without a launcher
device, rank, world = info.device, info.rank, info.world_size
print(f"rank {rank} of {world} ({info.launcher or 'no launcher'}) on {info.as_dict()['device']}, "
      f"process group {info.process_group}")

# The same data and initial weights in every process.
torch.manual_seed(0)
features = torch.randn(256, 4)
targets = features @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(256, 1)
net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
reference = ds.place_model(copy.deepcopy(net), device)  # trained alone, below

# The replica: placed on this process's device, then wrapped. Nothing else is needed.
model = DistributedDataParallel(ds.place_model(net, device))
optimizer = torch.optim.SGD(model.parameters(), lr=LR)

# 1. One step, checked: each rank takes its PER_RANK rows of one batch of PER_RANK * world.
X, y = ds.to_device(features[:PER_RANK * world], device), ds.to_device(targets[:PER_RANK * world], device)
mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
train_step(model, optimizer, X[mine], y[mine])
train_step(reference, torch.optim.SGD(reference.parameters(), lr=LR), X, y)  # the whole batch, alone
same_as_whole = torch.allclose(weights(model.module), weights(reference), rtol=1e-5, atol=1e-6)
print(f"rank {rank}: the DDP step equals one step on the whole batch: {same_as_whole}")

# 2. Every rank holds the same weights: the sum over the ranks is world times each rank's own.
mine_now = weights(model.module)
(summed,) = ds.allreduce([mine_now])  # sums across processes too, once a process group runs
same_everywhere = torch.allclose(summed, world * mine_now, rtol=1e-6, atol=1e-6)
print(f"rank {rank}: every rank holds the same weights: {same_everywhere}")

# 3. The training loop: the sampler hands each rank its own share of every epoch.
data = TensorDataset(features, targets)
sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
loader = DataLoader(data, batch_size=PER_RANK, sampler=sampler)
for epoch in range(EPOCHS):
    sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
    total = torch.zeros((), device=device)
    for X_batch, y_batch in loader:
        total += train_step(model, optimizer, ds.to_device(X_batch, device), ds.to_device(y_batch, device))
    (everyone,) = ds.allreduce([total / len(loader)])  # the mean loss of all ranks
    if rank == 0:
        print(f"epoch {epoch}: mean loss {float(ds.to_numpy(everyone)) / world:.4f}")

# Tear down in order: first what holds the process group (DDP's reducer, the sampler's loader),
# then, once every rank has reached the end, the group itself. A group destroyed under a live
# DDP model, or while another rank still talks to it, can abort inside gloo at exit
# ("terminate called without an active exception").
del model, optimizer, loader, sampler
gc.collect()
torch.distributed.barrier()
torch.distributed.destroy_process_group()
assert same_as_whole and same_everywhere

"""One rank of tests/test_distributed.py's torchrun jobs: writes what it sees to <folder>/rank<N>.json.

    python -m torch.distributed.run --nproc_per_node 2 tests/torchrun_worker.py <folder>

Not a test module (pytest collects test_*.py only). ``problem`` and ``sgd_step`` are shared
with the test, which computes the single-process reference step with them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

import devshim as ds

LR = 0.1
BATCH = 8


def problem():
    """The model and the whole batch, the same in every process (seeded)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    data = torch.Generator().manual_seed(1)
    X = torch.randn(BATCH, 4, generator=data)
    Y = torch.randn(BATCH, 2, generator=data)
    return net, X, Y


def sgd_step(model, X, Y) -> None:
    """One SGD step on the mean squared error of (X, Y)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    optimizer.zero_grad()
    ((model(X) - Y) ** 2).mean().backward()
    optimizer.step()


def flat(module) -> list:
    return [value for p in module.parameters() for value in ds.to_numpy(p).ravel().tolist()]


def main() -> None:
    info = ds.init_distributed(timeout=60)
    again = ds.init_distributed()  # idempotent: starts nothing, says the same
    device = ds.try_gpu()
    result = {
        "process": info.as_dict(),
        "again_same": again == info,
        "try_gpu": str(ds.neutral_device(torch.empty(0, device=device))),
        "try_all_gpus": [str(ds.neutral_device(torch.empty(0, device=d))) for d in ds.try_all_gpus()],
        "num_gpus": ds.num_gpus(),
    }

    # ds.allreduce: two local copies (the host and this process's device), summed over both
    # processes, under a guard that refuses every copy that was not asked for.
    rank = info.rank
    a = torch.tensor([rank + 1.0, 10.0 * (rank + 1)])
    b = ds.to_device(a, device)
    with ds.transfer_guard("disallow"):
        totals = ds.allreduce([a, b])
    result["allreduce"] = [ds.to_numpy(t).tolist() for t in totals]
    result["allreduce_devices"] = [str(ds.neutral_device(t)) for t in totals]
    result["inputs_unchanged"] = ds.to_numpy(a).tolist() == [rank + 1.0, 10.0 * (rank + 1)]

    # One DDP step, each rank on its share of the batch, on the CPU or on its virtual GPU.
    from torch.nn.parallel import DistributedDataParallel

    net, X, Y = problem()
    model = DistributedDataParallel(ds.place_model(net, device))
    result["ddp_device"] = str(ds.neutral_device(next(model.module.parameters())))
    share = BATCH // info.world_size
    rows = slice(rank * share, (rank + 1) * share)
    sgd_step(model, ds.to_device(X[rows], device), ds.to_device(Y[rows], device))
    result["ddp_parameters"] = flat(model.module)
    del model  # DDP's reducer holds the process group: let it go before the group
    with open(Path(sys.argv[1]) / f"rank{rank}.json", "w") as out:  # one file per rank: no interleaving
        json.dump(result, out)
    torch.distributed.barrier()  # no rank tears the group down while another still uses it
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()

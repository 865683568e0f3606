"""More than one process, for real: torchrun starts two ranks on this machine (gloo, loopback,
a free port), and each reports what devshim gave it (tests/torchrun_worker.py).

Also, in this process: ds.init_distributed() without a launcher (a world of one), and the
cross-process level of ds.allreduce in such a world.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from helpers import free_port, last_json_lines, run_python, start_python

pytest.importorskip("torch", reason="torch.distributed is PyTorch's; this environment has no torch")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import devshim as ds  # noqa: E402
from devshim import settings  # noqa: E402

TESTS = Path(__file__).resolve().parent
VIRTUAL = bool(os.environ.get(settings.VIRTUAL_DEVICES_VAR, "").strip())
RANKS = 2


def loopback_only() -> dict:
    """Variables that keep gloo's connections on the loopback interface."""
    names = [name for _, name in socket.if_nameindex() if name.startswith("lo")]
    return {"GLOO_SOCKET_IFNAME": names[0]} if names else {}


# What gloo prints when a rank's C++ threads are torn down unjoined at interpreter exit: seen
# now and then on this 2-core CI machine under load, after every rank had finished its work and
# destroyed its process group (a PyTorch teardown race, not a result of the code under test).
_GLOO_EXIT_ABORT = "terminate called without an active exception"


def torchrun(script: str, *args: str, **env: str):
    """``python -m torch.distributed.run`` with RANKS processes on 127.0.0.1 and a free port,
    bounded in time; returns the CompletedProcess.

    A run that failed only through gloo's abort at exit is run once more (on a new port), so
    that PyTorch's teardown race does not fail the suite; a second abort fails it."""
    env = {**loopback_only(), "OMP_NUM_THREADS": "1", **env}
    for _attempt in range(2):
        command = ["-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(RANKS),
                   "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "--max_restarts", "0",
                   script, *args]
        completed = run_python("", *command, timeout=240, **env)
        if completed.returncode == 0 or _GLOO_EXIT_ABORT not in completed.stdout + completed.stderr:
            return completed
    return completed


def two_nodes(script: str, **env: str) -> str:
    """Two torchrun agents on this machine as two nodes of two ranks each (one static rendezvous
    on a free port); their output together. Retried once after gloo's abort at exit, as torchrun()."""
    env = {**loopback_only(), "OMP_NUM_THREADS": "1", **env}
    for _attempt in range(2):
        port = str(free_port())
        nodes = [start_python("", "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(node),
                              "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", port,
                              "--max_restarts", "0", script, **env)
                 for node in range(2)]
        finished = []
        try:
            for node in nodes:
                finished.append((node.communicate(timeout=240), node.returncode))
        finally:
            for node in nodes:
                if node.poll() is None:
                    node.kill()
                    node.wait()
        text = "".join(out + err for (out, err), _ in finished)
        if all(code == 0 for _, code in finished):
            return text
        if _GLOO_EXIT_ABORT not in text:
            break
    raise AssertionError(text)


def rank_results(folder: Path, **env: str) -> dict:
    """Run tests/torchrun_worker.py on RANKS ranks; rank -> what it wrote."""
    completed = torchrun(str(TESTS / "torchrun_worker.py"), str(folder), **env)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    by_rank = {}
    for rank in range(RANKS):
        by_rank[rank] = json.loads((folder / f"rank{rank}.json").read_text())
        assert by_rank[rank]["process"]["rank"] == rank
    return by_rank


@pytest.mark.skipif(VIRTUAL, reason="the virtual-GPU pass runs the two ranks on virtual GPUs instead "
                    "(test_two_torchrun_ranks_on_virtual_gpus_each_take_their_own_allreduce_across_and_train_with_ddp)")
def test_two_torchrun_ranks_on_the_cpu_place_allreduce_and_train_with_ddp(tmp_path):
    results = rank_results(tmp_path, DEVSHIM_DEVICE="cpu")  # the CPU, on a GPU machine too
    for rank, r in results.items():
        assert r["process"] == {"launcher": "torchrun", "rank": rank, "local_rank": rank, "world_size": RANKS,
                                "local_world_size": RANKS, "device": "cpu:0", "backend": "torch",
                                "process_group": "gloo"}
        assert r["again_same"]
        assert r["try_gpu"] == "cpu:0" and r["try_all_gpus"] == ["cpu:0"]
        # (1 + 2) on each process, two local copies each: 6; the same for the second entry, times 10
        assert r["allreduce"] == [[6.0, 60.0], [6.0, 60.0]]
        assert r["allreduce_devices"] == ["cpu:0", "cpu:0"] and r["inputs_unchanged"]

    assert_one_ddp_step_on_the_whole_batch(results)


def assert_one_ddp_step_on_the_whole_batch(results: dict) -> None:
    """Every rank holds the same parameters after one DDP step, equal to one step on the whole
    batch in one process."""
    from torchrun_worker import flat, problem, sgd_step

    first = results[0]["ddp_parameters"]
    assert all(r["ddp_parameters"] == first for r in results.values())
    net, X, Y = problem()
    sgd_step(net, X, Y)
    reference = torch.tensor(flat(net))
    assert torch.allclose(torch.tensor(first), reference, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(reference, torch.tensor(flat(problem()[0])))  # the step changed them


@pytest.mark.skipif(not VIRTUAL, reason=f"runs in the pass with {settings.VIRTUAL_DEVICES_VAR} set "
                    "(the plain pass runs the ranks on the CPU)")
def test_two_torchrun_ranks_on_virtual_gpus_each_take_their_own_allreduce_across_and_train_with_ddp(tmp_path):
    results = rank_results(tmp_path, DEVSHIM_VIRTUAL_DEVICES="2")
    for rank, r in results.items():
        own = f"gpu:{rank}"
        assert r["process"]["device"] == own and r["process"]["process_group"] == "gloo"
        assert r["try_gpu"] == own and r["try_all_gpus"] == [own] and r["num_gpus"] == 2
        assert r["allreduce"] == [[6.0, 60.0], [6.0, 60.0]]  # through the host, under "disallow"
        assert r["allreduce_devices"] == ["cpu:0", own] and r["inputs_unchanged"]
        assert r["ddp_device"] == own  # DDP's replica on the rank's virtual GPU, gloo underneath
    assert_one_ddp_step_on_the_whole_batch(results)


@pytest.mark.skipif(not VIRTUAL, reason=f"runs in the pass with {settings.VIRTUAL_DEVICES_VAR} set")
def test_the_ddp_example_on_two_nodes_of_two_processes_on_virtual_gpus():
    """Two torchrun "nodes" on this machine (--nnodes 2, one static rendezvous), two ranks each,
    every rank on its node's virtual GPU of its local rank: each DDP step equals one step on the
    whole batch, on every rank."""
    text = two_nodes(str(TESTS.parent / "examples" / "ddp.py"), DEVSHIM_VIRTUAL_DEVICES="2")
    for rank in range(4):
        assert f"rank {rank} of 4 (torchrun) on gpu:{rank % 2}, process group gloo" in text
        assert f"rank {rank}: the DDP step equals one step on the whole batch: True" in text
        assert f"rank {rank}: every rank holds the same weights: True" in text


def test_the_ddp_example_runs_under_torchrun_and_alone():
    """On the CPU, on any machine (DEVSHIM_DEVICE=cpu: two ranks sharing one real GPU is what
    devshim's SharedDeviceWarning is about, and NCCL refuses it)."""
    example = str(TESTS.parent / "examples" / "ddp.py")
    two = torchrun(example, DEVSHIM_VIRTUAL_DEVICES="0", DEVSHIM_DEVICE="cpu")
    assert two.returncode == 0, two.stdout + two.stderr
    for rank in range(RANKS):
        assert f"rank {rank} of {RANKS} (torchrun) on cpu:0" in two.stdout
        assert f"rank {rank}: the DDP step equals one step on the whole batch: True" in two.stdout
        assert f"rank {rank}: every rank holds the same weights: True" in two.stdout
    alone = run_python("", example, timeout=240, DEVSHIM_VIRTUAL_DEVICES="0", DEVSHIM_DEVICE="cpu")
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert "rank 0 of 1 (no launcher) on cpu:0" in alone.stdout
    assert "rank 0: the DDP step equals one step on the whole batch: True" in alone.stdout


OPENMPI_RANK = """
import json
import torch
import devshim as ds

info = ds.init_distributed(timeout=60)
(total,) = ds.allreduce([torch.tensor([info.rank + 1.0])])
print(json.dumps({**info.as_dict(), "total": ds.to_numpy(total).tolist()}))
torch.distributed.barrier()  # no rank tears the group down while another still uses it
torch.distributed.destroy_process_group()
"""


def test_init_distributed_under_openmpi_variables_meets_at_master_port_on_one_machine():
    """Two interpreters with mpirun's variables and MASTER_PORT (no MASTER_ADDR: all on this
    machine) start a gloo group from them and allreduce across it."""
    port = str(free_port())
    # DEVSHIM_DEVICE=cpu: two ranks on this machine sharing one real GPU would each warn so (and
    # NCCL refuses two ranks on one GPU); on the CPU the group is gloo on any machine.
    ranks = [start_python(OPENMPI_RANK, OMPI_COMM_WORLD_LOCAL_RANK=str(r), OMPI_COMM_WORLD_RANK=str(r),
                          OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_LOCAL_SIZE="2", MASTER_PORT=port,
                          OMP_NUM_THREADS="1", DEVSHIM_DEVICE="cpu", **loopback_only())
             for r in range(RANKS)]
    seen = last_json_lines(ranks)
    for rank, info in enumerate(seen):
        assert (info["launcher"], info["rank"], info["world_size"], info["process_group"]) == ("openmpi", rank, 2, "gloo")
        assert info["total"] == [3.0]


# ------------------------------------------------------------------ one process, in this one


@pytest.fixture
def world_of_one(setenv):
    for variable in settings.LAUNCHER_VARIABLES:
        setenv(variable, None)
    assert not dist.is_initialized()
    yield ds.init_distributed(timeout=30)
    dist.destroy_process_group()


def test_init_distributed_without_a_launcher_starts_a_world_of_one(world_of_one):
    info = world_of_one
    assert (info.launcher, info.rank, info.world_size) == (None, 0, 1)
    assert info.device == ds.try_gpu(backend="torch")
    # gloo on the CPU and on virtual GPUs; on a real GPU, torch's default pair (NCCL for CUDA)
    own = info.device.type
    if own in ("cpu", "vgpu"):
        assert info.process_group == "gloo"
    elif own == "cuda" and dist.is_nccl_available():
        assert info.process_group == "cpu:gloo,cuda:nccl"
    else:  # another accelerator: its own backend for its tensors, gloo for CPU tensors beside it
        assert info.process_group.startswith("cpu:gloo,")
    assert dist.is_initialized() and dist.get_world_size() == 1
    assert ds.init_distributed() == info  # idempotent


def test_allreduce_in_a_process_group_returns_new_tensors_and_leaves_inputs(world_of_one):
    x = torch.tensor([1.0, 2.0])
    (total,) = ds.allreduce([x])
    assert total is not x and torch.equal(total, x)  # a world of one: the sum is x, in a new tensor
    total += 1
    assert torch.equal(x, torch.tensor([1.0, 2.0]))


def test_allreduce_returns_once_gloo_has_let_go_of_its_tensors(world_of_one):
    """gloo's worker thread drops a finished sum's tensors a moment after the caller is told it
    finished; torch before 2.8 then deadlocks in destroy_process_group if Python has dropped one
    (the teardown of the test above hung CI on torch 2.4.1). devshim's sum returns only once the
    thread let go, or keeps the tensor itself. Without that, from 2 calls in 1000 (alone) to 1 in
    20 (in this suite) return a tensor gloo still holds, measured on torch 2.4.1 and 2.13."""
    from devshim.backends.torch import _distributed
    from devshim.backends.torch._internals import TENSOR_USE_COUNT

    use_count = TENSOR_USE_COUNT.get()
    assert use_count is not None, "the probe is checked on every tested torch (tests/test_internals.py)"
    held_elsewhere = []
    for step in range(1000):
        (total,) = ds.allreduce([torch.full((3,), float(step))])
        if use_count(total) > 1 and not any(total is kept for kept in _distributed._still_held):
            held_elsewhere.append(step)
    assert held_elsewhere == []
    assert torch.equal(total, torch.full((3,), 999.0))


def test_init_distributed_under_openmpi_needs_a_rendezvous_address(setenv):
    for variable in settings.LAUNCHER_VARIABLES + ("MASTER_ADDR", "MASTER_PORT"):
        setenv(variable, None)
    for variable, value in (("OMPI_COMM_WORLD_LOCAL_RANK", "0"), ("OMPI_COMM_WORLD_RANK", "0"),
                            ("OMPI_COMM_WORLD_SIZE", "4"), ("OMPI_COMM_WORLD_LOCAL_SIZE", "2")):
        setenv(variable, value)
    with pytest.raises(ds.LauncherEnvironmentError, match="needs MASTER_ADDR and MASTER_PORT"):
        ds.init_distributed()
    assert not dist.is_initialized()


def test_init_distributed_under_tf_config_says_how_to_give_torch_its_own_rendezvous(setenv):
    """A job TF_CONFIG describes on two machines: torch needs an address and a port of its own
    (TF_CONFIG's ports are TensorFlow's), and the message says so for that launcher."""
    for variable in settings.LAUNCHER_VARIABLES + ("MASTER_ADDR", "MASTER_PORT"):
        setenv(variable, None)
    setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["host-a:2222", "host-b:2222"]},
                                    "task": {"type": "worker", "index": 1}}))
    with pytest.raises(ds.LauncherEnvironmentError, match="under tf_config needs MASTER_ADDR and MASTER_PORT") as err:
        ds.init_distributed()
    assert "the host of TF_CONFIG's chief, or of worker 0" in str(err.value)
    assert "horovodrun" not in str(err.value)
    assert not dist.is_initialized()


@pytest.mark.registers_torch_virtual_gpus
def test_the_process_group_backend_suits_the_device():
    from devshim.backends.torch._distributed import backend_for

    assert backend_for(torch.device("cpu")) == "gloo"
    if dist.is_nccl_available():
        assert backend_for(torch.device("cuda", 1)) == "cpu:gloo,cuda:nccl"
    release = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    if release >= (2, 10):  # virtual GPUs need torch 2.10 (refused before, by name: test_torch_virtual.py)
        ds.testing.virtual_devices(2)
        assert backend_for(ds.gpu(1, backend="torch")) == "gloo"


"""One device per process under a launcher: the local-rank rule, for each launcher's variables.

The accelerators are faked (a stand-in backend says how many GPUs it has), so the rule is
checked on a machine without GPUs, in every tox environment. The frameworks' own virtual
GPUs are checked at the end, one fresh interpreter per installed framework.
"""

from __future__ import annotations

import json
import warnings

import pytest

import devshim as ds
from devshim import backends, settings
from devshim.backends import BackendSpec
from devshim._device import Device
from helpers import FakeGpu, WithoutTensors, free_port, last_json_lines, run_python, start_python


class ManyGpus(WithoutTensors, backends.Backend):
    """A backend whose machine has ``count`` GPUs (a class attribute the tests set)."""

    spec = BackendSpec("manygpus", import_name="json", title="A machine with GPUs", auto_rank=None)
    count = 4

    def is_tensor(self, x):
        return False

    def is_native_device(self, obj):
        return isinstance(obj, FakeGpu)

    def accelerator_count(self):
        return ManyGpus.count

    def make_native_device(self, kind, index):
        return "cpu" if kind == "cpu" else FakeGpu(index)

    def describe(self, native):
        if isinstance(native, FakeGpu):
            return Device("gpu", native.index, native=native, backend="manygpus")
        return Device("cpu", native="cpu", backend="manygpus")


@pytest.fixture
def machine(setenv, monkeypatch):
    """``machine(gpus, **variables)``: a process started with exactly these launcher and visibility
    variables, on a machine with ``gpus`` GPUs; the stand-in backend is selected."""
    backends.register_backend(ManyGpus.spec, ManyGpus)

    def start(gpus: int, **variables):
        monkeypatch.setattr(ManyGpus, "count", gpus)
        for name in settings.LAUNCHER_VARIABLES + settings.VISIBILITY_VARIABLES + (
                "SLURM_NTASKS", settings.VIRTUAL_DEVICES_VAR, settings.DEVICE_VAR):
            monkeypatch.delenv(name, raising=False)
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        settings.reload()

    with ds.use_backend("manygpus"):
        yield start
    backends.unregister_backend("manygpus")


TORCHRUN = dict(LOCAL_RANK="3", RANK="7", WORLD_SIZE="8", LOCAL_WORLD_SIZE="4")
OPENMPI = dict(OMPI_COMM_WORLD_LOCAL_RANK="3", OMPI_COMM_WORLD_RANK="7", OMPI_COMM_WORLD_SIZE="8",
               OMPI_COMM_WORLD_LOCAL_SIZE="4")
HOROVOD = dict(HOROVOD_LOCAL_RANK="3", HOROVOD_RANK="7", HOROVOD_SIZE="8", HOROVOD_LOCAL_SIZE="4")
# srun -N 2 --ntasks-per-node 4: this is the second node (SLURM_NODEID=1)
SLURM = dict(SLURM_LOCALID="3", SLURM_PROCID="7", SLURM_STEP_NUM_TASKS="8", SLURM_STEP_TASKS_PER_NODE="4(x2)",
             SLURM_NODEID="1", SLURM_NTASKS="8")
LAUNCHED = {"torchrun": TORCHRUN, "openmpi": OPENMPI, "horovod": HOROVOD, "slurm": SLURM}


def test_without_a_launcher_a_process_has_every_gpu(machine):
    machine(4)
    assert ds.try_gpu() == FakeGpu(0) and ds.gpu() == FakeGpu(0)
    assert ds.try_all_gpus() == [FakeGpu(i) for i in range(4)]
    info = ds.process_info()
    assert (info.launcher, info.rank, info.local_rank, info.world_size, info.local_world_size) == (None, 0, 0, 1, 1)


@pytest.mark.parametrize("launcher", sorted(LAUNCHED))
def test_each_launcher_gives_its_process_the_gpu_of_its_local_rank(machine, launcher):
    machine(4, **LAUNCHED[launcher])
    assert ds.try_gpu() == FakeGpu(3) and ds.gpu() == FakeGpu(3)
    assert ds.try_all_gpus() == [FakeGpu(3)]
    assert ds.num_gpus() == 4  # the machine still has four
    info = ds.process_info()
    assert (info.launcher, info.rank, info.local_rank, info.world_size, info.local_world_size) == (launcher, 7, 3, 8, 4)
    assert info.device == FakeGpu(3) and info.backend == "manygpus"
    assert info.as_dict()["device"] == "gpu:3"


@pytest.mark.parametrize("launcher", sorted(LAUNCHED))
def test_an_explicit_index_keeps_its_meaning(machine, launcher):
    machine(4, **LAUNCHED[launcher])
    assert ds.try_gpu(0) == FakeGpu(0) and ds.gpu(0) == FakeGpu(0)
    assert ds.try_gpu(2) == FakeGpu(2) and ds.try_gpu(9) == "cpu"
    with pytest.raises(ds.DeviceUnavailableError, match="gpu:4 is not available"):
        ds.gpu(4)


@pytest.mark.parametrize("outer", ["slurm", "openmpi", "horovod"])
def test_the_innermost_launcher_wins(machine, outer):
    # Everything started inside a Slurm allocation inherits its variables (a batch script has
    # SLURM_LOCALID=0); torchrun inside srun or mpirun sets LOCAL_RANK, which wins.
    inner = dict(LOCAL_RANK="1", RANK="1", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    machine(4, **{**LAUNCHED[outer], **inner})
    assert ds.process_info().launcher == "torchrun" and ds.try_gpu() == FakeGpu(1)


@pytest.mark.parametrize("inner", ["openmpi", "horovod"])
def test_mpirun_and_horovodrun_in_a_slurm_batch_script_win_over_its_inherited_slurm_localid(machine, inner):
    batch_script = dict(SLURM_LOCALID="0", SLURM_PROCID="0", SLURM_NTASKS="8")
    machine(4, **{**batch_script, **LAUNCHED[inner]})
    assert ds.process_info().launcher == inner and ds.try_gpu() == FakeGpu(3)


def test_a_slurm_batch_script_is_one_process_and_keeps_every_gpu(machine):
    machine(4, SLURM_LOCALID="0", SLURM_PROCID="0", SLURM_NTASKS="8", SLURM_NODEID="0")
    assert ds.try_all_gpus() == [FakeGpu(i) for i in range(4)]
    info = ds.process_info()
    assert (info.launcher, info.world_size) == ("slurm", 1)


@pytest.mark.parametrize("variables", [
    dict(LOCAL_RANK="0", RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1"),  # torchrun --nproc_per_node 1
    dict(SLURM_LOCALID="0", SLURM_PROCID="0", SLURM_STEP_NUM_TASKS="1", SLURM_STEP_TASKS_PER_NODE="1"),
], ids=["torchrun", "srun -n 1"])
def test_a_job_of_one_process_keeps_every_gpu(machine, variables):
    machine(4, **variables)
    assert ds.try_all_gpus() == [FakeGpu(i) for i in range(4)] and ds.try_gpu() == FakeGpu(0)


def test_a_local_rank_alone_is_enough(machine):
    machine(2, LOCAL_RANK="1")
    assert ds.try_gpu() == FakeGpu(1) and ds.try_all_gpus() == [FakeGpu(1)]
    info = ds.process_info()
    assert (info.rank, info.world_size, info.local_world_size) == (None, None, None)


def test_slurm_tasks_per_node_is_read_for_this_node(machine):
    machine(4, SLURM_LOCALID="1", SLURM_PROCID="7", SLURM_STEP_NUM_TASKS="8",
            SLURM_STEP_TASKS_PER_NODE="3(x2),2", SLURM_NODEID="2")
    assert ds.process_info().local_world_size == 2
    machine(4, SLURM_LOCALID="1", SLURM_PROCID="1", SLURM_STEP_NUM_TASKS="8",
            SLURM_STEP_TASKS_PER_NODE="3(x2),2", SLURM_NODEID="1")
    assert ds.process_info().local_world_size == 3


def test_cuda_visible_devices_narrowed_to_one_gives_index_0_without_a_warning(machine):
    # srun --gpus-per-task 1 (or a wrapper script) leaves each process one visible GPU.
    machine(1, **TORCHRUN, CUDA_VISIBLE_DEVICES="3")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ds.try_gpu() == FakeGpu(0) and ds.try_all_gpus() == [FakeGpu(0)]


def test_more_ranks_than_gpus_share_them_modulo_and_warn_once(machine):
    machine(3, LOCAL_RANK="4", RANK="4", WORLD_SIZE="6", LOCAL_WORLD_SIZE="6")
    with pytest.warns(ds.SharedDeviceWarning, match=r"6 processes on this machine share 3 GPUs") as caught:
        assert ds.try_gpu() == FakeGpu(1)
        assert ds.try_all_gpus() == [FakeGpu(1)] and ds.gpu() == FakeGpu(1)
    assert len(caught) == 1
    assert "LOCAL_RANK=4" in str(caught[0].message) and "--nproc_per_node 3" in str(caught[0].message)
    assert caught[0].filename == __file__  # it points at the caller's line


def test_a_visible_device_list_of_several_still_warns_when_shared(machine):
    machine(2, **TORCHRUN, CUDA_VISIBLE_DEVICES="0,1")
    with pytest.warns(ds.SharedDeviceWarning, match="4 processes on this machine share 2 GPUs"):
        assert ds.try_gpu() == FakeGpu(1)


def test_as_many_gpus_as_ranks_do_not_warn(machine):
    machine(4, **TORCHRUN)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ds.try_gpu() == FakeGpu(3)


@pytest.mark.parametrize("launcher", sorted(LAUNCHED))
def test_devshim_device_cpu_still_wins(machine, launcher):
    machine(4, **LAUNCHED[launcher], DEVSHIM_DEVICE="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ds.try_gpu() == "cpu" and ds.try_all_gpus() == ["cpu"]
    with pytest.raises(ds.DeviceUnavailableError, match="hidden by DEVSHIM_DEVICE=cpu"):
        ds.gpu()
    assert ds.process_info().device == "cpu"


def test_no_gpu_under_a_launcher_means_the_cpu(machine):
    machine(0, **TORCHRUN)
    assert ds.try_gpu() == "cpu" and ds.try_all_gpus() == ["cpu"]
    with pytest.raises(ds.DeviceUnavailableError, match="gpu:0 is not available"):
        ds.gpu()


@pytest.mark.parametrize("variable", ["LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK",
                                      "HOROVOD_LOCAL_RANK"])
def test_a_rank_that_is_not_a_number_is_refused_saying_which(machine, variable):
    machine(2, **{variable: "first"})
    with pytest.raises(ds.LauncherEnvironmentError, match=f"{variable}='first' is not a whole number"):
        ds.try_gpu()
    with pytest.raises(ValueError):
        ds.process_info()


def test_the_variables_are_read_once(machine, monkeypatch):
    machine(4, **TORCHRUN)
    assert ds.try_gpu() == FakeGpu(3)
    monkeypatch.setenv("LOCAL_RANK", "2")  # behind devshim's back...
    assert ds.try_gpu() == FakeGpu(3)  # ...so still what was read
    settings.reload()
    assert ds.try_gpu() == FakeGpu(2)


def tf_config(task_type: str, index: int, **cluster) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def test_tf_config_says_the_rank_among_the_workers_and_the_local_rank_on_its_host(machine):
    # Two machines: the chief and two workers on a, one worker on b. The chief is worker 0.
    cluster = dict(chief=["a:1000"], worker=["a:1001", "a:1002", "b:1000"])
    machine(4, TF_CONFIG=tf_config("worker", 1, **cluster))
    assert ds.try_gpu() == FakeGpu(2) and ds.try_all_gpus() == [FakeGpu(2)]
    info = ds.process_info()
    assert (info.launcher, info.rank, info.local_rank, info.world_size, info.local_world_size) == \
        ("tf_config", 2, 2, 4, 3)
    machine(4, TF_CONFIG=tf_config("worker", 2, **cluster))  # alone on b
    assert ds.try_gpu() == FakeGpu(0) and ds.process_info().rank == 3
    machine(4, TF_CONFIG=tf_config("ps", 0, ps=["a:2000"], **cluster))  # trains nothing: no rank
    assert ds.process_info().rank is None and ds.try_gpu() == FakeGpu(3)
    machine(4, TF_CONFIG=tf_config("worker", 0, worker=["a:1"]))  # a job of one keeps every GPU
    assert ds.try_all_gpus() == [FakeGpu(i) for i in range(4)]


def test_tf_config_comes_after_horovod_and_before_slurm(machine):
    job = tf_config("worker", 1, worker=["a:1", "a:2"])
    machine(4, TF_CONFIG=job, **SLURM)
    assert ds.process_info().launcher == "tf_config"
    machine(4, TF_CONFIG=job, **HOROVOD)
    assert ds.process_info().launcher == "horovod"


@pytest.mark.parametrize("value, says", [("{not json", "is not the JSON TensorFlow expects"),
                                         ('{"cluster": {"worker": ["a:1"]}}', "its task has no type"),
                                         (tf_config("worker", 3, worker=["a:1"]), "names task worker 3")])
def test_a_tf_config_devshim_cannot_read_is_refused_saying_why(machine, value, says):
    machine(2, TF_CONFIG=value)
    with pytest.raises(ds.LauncherEnvironmentError, match=says):
        ds.try_gpu()


def test_every_launcher_variable_is_listed():
    listed = set(settings.LAUNCHER_VARIABLES)
    for variables in LAUNCHED.values():
        assert set(variables) - {"SLURM_NTASKS"} <= listed
    assert settings.TF_CONFIG_VAR in listed


# ------------------------------------------------------------------ the frameworks' own devices


def test_torch_finds_its_accelerator_without_the_calls_that_initialise_cuda(monkeypatch, setenv):
    """Fork safety: counting CUDA devices goes through torch.cuda.device_count (NVML), never
    torch.cuda.is_available or torch.accelerator.is_available (cudaGetDeviceCount)."""
    torch = pytest.importorskip("torch")
    from devshim.backends.torch.core import TorchBackend

    def poisons_fork(*args, **kwargs):
        raise AssertionError("this call initialises CUDA in the parent of a forking launcher")

    monkeypatch.setattr(torch.accelerator, "current_accelerator",
                        lambda check_available=False: poisons_fork() if check_available else torch.device("cuda"))
    monkeypatch.setattr(torch.accelerator, "is_available", poisons_fork)
    monkeypatch.setattr(torch.cuda, "is_available", poisons_fork)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    adapter = TorchBackend()
    assert adapter.accelerator_platform() == "cuda" and adapter.accelerator_count() == 2


def test_tensorflow_counts_the_visible_gpus_as_horovod_pins_them(monkeypatch, machine):
    """Horovod's recipe, tf.config.set_visible_devices(gpus[local_rank], "GPU"), leaves one GPU
    visible: TensorFlow's /GPU:0 is then this process's, and no warning is due."""
    pytest.importorskip("tensorflow")
    from devshim.backends.tensorflow.core import TensorflowBackend

    machine(0, **TORCHRUN)
    adapter = TensorflowBackend()
    tf = adapter.fw
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: ["g0", "g1", "g2", "g3"])
    monkeypatch.setattr(tf.config, "get_visible_devices", lambda kind=None: ["g3"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert adapter.num_gpus() == 1 and adapter.visibility_narrowed()
        assert adapter.try_gpu() == "/GPU:0" and adapter.try_all_gpus() == ["/GPU:0"]


PROBE = """
import devshim as ds
bk = ds.get_backend()
try:
    ds.num_gpus()
except ds.DevshimError as err:  # virtual GPUs this release of the framework cannot present
    print("no virtual GPUs:", err)
    raise SystemExit(0)
own, every = ds.try_gpu(), ds.try_all_gpus()
print(str(bk.describe(own)), bk.describe(own).virtual, [str(bk.describe(d)) for d in every],
      str(bk.describe(ds.try_gpu(0))), ds.num_gpus())
"""


@pytest.mark.same_in_every_pass  # fresh interpreters naming their own backend
@pytest.mark.parametrize("framework", [name for name, spec in ds.backends.specs().items() if spec.virtual_devices])
def test_a_launched_process_takes_its_own_virtual_gpu_on_every_framework(framework):
    if framework not in ds.available_backends():
        pytest.skip(f"{framework} is not installed in this environment")
    result = run_python(PROBE, DEVSHIM_BACKEND=framework, DEVSHIM_VIRTUAL_DEVICES="2", LOCAL_RANK="1",
                        RANK="1", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", timeout=240)
    assert result.returncode == 0, result.stderr
    if result.stdout.startswith("no virtual GPUs:"):  # refused by name (torch before 2.10: test_torch_virtual.py)
        pytest.skip(result.stdout.strip())
    assert result.stdout.split("\n")[0] == "gpu:1 True ['gpu:1'] gpu:0 2"


JAX_RECIPE = """
import json, os
import jax
import devshim as ds

launch = ds.settings.launcher()  # docs/distributed.md's recipe: before JAX starts its backends
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{os.environ['COORDINATOR_PORT']}",
                           num_processes=launch.world_size, process_id=launch.rank,
                           local_device_ids=[launch.local_rank])
bk = ds.get_backend()
print(json.dumps({"own": str(bk.describe(ds.try_gpu())), "all": [str(bk.describe(d)) for d in ds.try_all_gpus()],
                  "process_index": jax.process_index(), "process_count": jax.process_count()}))
"""


@pytest.mark.same_in_every_pass  # fresh interpreters naming their own backend
def test_the_jax_distributed_recipe_on_two_processes_of_a_fake_launcher():
    """Two interpreters with torchrun's variables run docs/distributed.md's JAX recipe (on the CPU,
    with virtual GPUs, a free loopback port, bounded in time); each takes its own virtual GPU."""
    if "jax" not in ds.available_backends():
        pytest.skip("jax is not installed in this environment")
    port = str(free_port())
    # JAX_PLATFORMS=cpu: the CPU machine this recipe is for, also where JAX sees a real GPU.
    ranks = [start_python(JAX_RECIPE, DEVSHIM_BACKEND="jax", DEVSHIM_VIRTUAL_DEVICES="2", COORDINATOR_PORT=port,
                          LOCAL_RANK=str(r), RANK=str(r), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                          PYTHONWARNINGS="error::UserWarning", JAX_PLATFORMS="cpu")
             for r in range(2)]
    outputs = last_json_lines(ranks)
    for rank, seen in enumerate(outputs):
        assert seen == {"own": f"gpu:{rank}", "all": [f"gpu:{rank}"], "process_index": rank, "process_count": 2}


JAX_DISTRIBUTED = """
import json, os
import jax
import devshim as ds

# No launcher: the processes are told their place by jax.distributed alone.
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{os.environ['COORDINATOR_PORT']}",
                           num_processes=2, process_id=int(os.environ["PROCESS_ID"]))
info = ds.process_info()
bk = ds.get_backend()
print(json.dumps({"info": info.as_dict(), "all": [str(bk.describe(d)) for d in ds.try_all_gpus()],
                  "launch": ds.settings.launcher() is not None}))
"""


@pytest.mark.same_in_every_pass  # fresh interpreters naming their own backend
@pytest.mark.parametrize("virtual", ["2", "0"], ids=["two-virtual-gpus", "no-gpu"])
def test_jax_distributed_alone_says_each_process_its_rank_and_gives_it_its_own_gpu(virtual):
    """Two interpreters meet through jax.distributed.initialize (a local coordinator, a free
    port) with no launcher variables: each is rank process_index() of process_count(), and
    takes the virtual GPU of its rank."""
    if "jax" not in ds.available_backends():
        pytest.skip("jax is not installed in this environment")
    port = str(free_port())
    # JAX_PLATFORMS=cpu: a machine without a GPU for JAX, as the "no-gpu" case says, on any machine.
    ranks = [start_python(JAX_DISTRIBUTED, DEVSHIM_BACKEND="jax", DEVSHIM_VIRTUAL_DEVICES=virtual,
                          COORDINATOR_PORT=port, PROCESS_ID=str(r), PYTHONWARNINGS="error::UserWarning",
                          JAX_PLATFORMS="cpu")
             for r in range(2)]
    for rank, seen in enumerate(last_json_lines(ranks)):
        own = f"gpu:{rank}" if virtual == "2" else "cpu:0"
        assert seen["info"] == {"launcher": "jax.distributed", "rank": rank, "local_rank": rank, "world_size": 2,
                                "local_world_size": None, "device": own, "backend": "jax", "process_group": None}
        assert seen["all"] == [own] and not seen["launch"]


TF_WORKER = """
import json
import tensorflow as tf
import devshim as ds

ds.num_gpus()  # devshim first: its virtual GPUs exist before the strategy starts TensorFlow
strategy = tf.distribute.MultiWorkerMirroredStrategy()  # reads TF_CONFIG, meets the other worker
info = ds.process_info()

@tf.function
def total():
    return tf.distribute.get_replica_context().all_reduce("sum", tf.constant(float(info.rank + 1)))

print(json.dumps({"info": info.as_dict(), "sum": float(strategy.run(total).numpy())}))
"""


@pytest.mark.same_in_every_pass  # fresh interpreters naming their own backend
def test_two_tensorflow_workers_from_tf_config_each_take_their_own_virtual_gpu():
    """Two interpreters with TF_CONFIG describing two workers on localhost (free ports) meet in a
    MultiWorkerMirroredStrategy; each says its rank and takes the virtual GPU of its local rank."""
    if "tensorflow" not in ds.available_backends():
        pytest.skip("tensorflow is not installed in this environment")
    workers = [f"localhost:{free_port()}", f"localhost:{free_port()}"]
    ranks = [start_python(TF_WORKER, DEVSHIM_BACKEND="tensorflow", DEVSHIM_VIRTUAL_DEVICES="2",
                          TF_CONFIG=tf_config("worker", r, worker=workers))
             for r in range(2)]
    for rank, seen in enumerate(last_json_lines(ranks, timeout=240)):
        assert seen["info"] == {"launcher": "tf_config", "rank": rank, "local_rank": rank, "world_size": 2,
                                "local_world_size": 2, "device": f"gpu:{rank}", "backend": "tensorflow",
                                "process_group": None}
        assert seen["sum"] == 3.0  # 1 + 2: the two workers are one job


@pytest.mark.same_in_every_pass  # fresh interpreters naming their own backend
def test_devshim_info_says_which_process_this_is_under_a_launcher():
    variables = dict(LOCAL_RANK="1", RANK="3", WORLD_SIZE="4", LOCAL_WORLD_SIZE="2", DEVSHIM_BACKEND="numpy")
    text = run_python("", "-m", "devshim", "info", timeout=240, **variables)
    assert text.returncode == 0, text.stderr
    assert "launcher: torchrun  rank 3 of 4, local rank 1 of 2" in text.stdout
    data = run_python("", "-m", "devshim", "info", "--json", timeout=240, **variables)
    assert json.loads(data.stdout)["process"] == {
        "launcher": "torchrun", "rank": 3, "local_rank": 1, "world_size": 4, "local_world_size": 2,
        "device": "cpu:0", "backend": "numpy", "process_group": None}


def test_devshim_info_says_nothing_of_processes_without_a_launcher(capsys, monkeypatch):
    from devshim import cli

    for name in settings.LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    settings.reload()
    assert cli.main(["info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["process"] is None
    assert cli.main(["info"]) == 0
    assert "process:" not in capsys.readouterr().out

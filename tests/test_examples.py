"""The examples run as users would run them: a fresh interpreter per example and framework."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import devshim as ds
from devshim_conformance import backends_with_harness, load_harness
from helpers import run_python
from machine import real_gpus

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SPECS = ds.backends.specs()


def named_in(example: str) -> list:
    """The backends an example has code of its own for: each backend name its code spells (as in
    `if backend == "torch":`), in the order it first does."""
    tree = ast.parse((EXAMPLES / example).read_text(encoding="utf-8"))
    found = sorted((node.lineno, node.col_offset, node.value) for node in ast.walk(tree)
                   if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in SPECS)
    return list(dict.fromkeys(name for _, _, name in found))


# The D2L chapter's frameworks: use_gpu.py runs unchanged under each.
D2L = named_in("use_gpu.py")
#: The examples written for whichever backend devshim selected: every backend with a harness.
EVERY = backends_with_harness()
# Every example and the tests that run it: a new example without a test fails here.
TESTED = {"use_gpu.py", "check_gpu.py", "logging_on_gpu.py", "generic_softplus.py", "model_parallel.py",
          "data_parallel.py", "custom_function.py", "largest_batch.py"}
#: Examples run by another test file, which must name them.
TESTED_ELSEWHERE = {"ddp.py": "test_distributed.py"}
#: Example projects (folders): a user's package with its own tests, which a test here runs.
PROJECTS = {"plugin_project"}


# Every test here runs fresh interpreters that name their own backend (run_python passes on no
# DEVSHIM_ variable): the same work whichever backend this pass selected.
pytestmark = pytest.mark.same_in_every_pass


def run_example(name: str, backend: str, *args: str, **env: str):
    if not SPECS[backend].is_installed():
        pytest.skip(f"{backend} is not installed in this environment")
    if SPECS[backend].virtual_devices:  # two virtual GPUs, so the multi-device paths really run
        env.setdefault("DEVSHIM_VIRTUAL_DEVICES", "2")
    result = run_python("", str(EXAMPLES / name), *args, DEVSHIM_BACKEND=backend, timeout=240, **env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_every_example_is_run_by_a_test():
    assert {p.name for p in EXAMPLES.glob("*.py")} == TESTED | set(TESTED_ELSEWHERE)
    assert {p.name for p in EXAMPLES.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))} == PROJECTS
    for script, test_file in TESTED_ELSEWHERE.items():
        assert f'"{script}"' in (Path(__file__).parent / test_file).read_text()


@pytest.mark.parametrize("backend", D2L)
@pytest.mark.parametrize("variables", [{"DEVSHIM_VIRTUAL_DEVICES": "2"}, {"DEVSHIM_VIRTUAL_DEVICES": "0"},
                                       {"DEVSHIM_DEVICE": "cpu"}],
                         ids=["two-virtual-gpus", "as-is", "DEVSHIM_DEVICE=cpu"])
def test_use_gpu_runs_the_d2l_chapter_unchanged_under_each_framework(backend, variables):
    out = run_example("use_gpu.py", backend, **variables)
    lines = out.splitlines()
    assert all(line.startswith(f"{backend}: ") for line in lines)
    assert "copy_if_needed(Z, try_gpu(1)) is Z: True" in out
    assert "to_device(Z, try_gpu(1)) is Z: False (always a copy)" in out
    assert "try_all_gpus() is [" in out and "(never empty)" in out
    if variables.get("DEVSHIM_VIRTUAL_DEVICES") == "2":
        assert f"{backend}: 2 GPU(s)" in out
        assert "X is on gpu:0, Y is on gpu:1" in out and "Y + Z is on gpu:1" in out
        assert "ds.ensure_same_device(X, Y) says: Tensors are on different devices" in out
        assert "X + Y under transfer_guard('disallow') is refused" in out
        assert "the model's parameters are on gpu:0; net(X) is on gpu:0" in out
    else:  # as the machine is (its real GPUs, asked of the framework itself), or with them hidden
        gpus = 0 if "DEVSHIM_DEVICE" in variables else real_gpus(backend)
        x_on, y_on = ("gpu:0" if gpus else "cpu:0"), ("gpu:1" if gpus > 1 else "cpu:0")  # try_gpu(), try_gpu(1)
        assert f"{backend}: {gpus} GPU(s)" in out and "(no GPU 10: the CPU)" in out
        assert f"X is on {x_on}, Y is on {y_on}" in out and f"Y + Z is on {y_on}" in out
        assert ("would mix devices" in out) == (x_on != y_on)
        assert f"the model's parameters are on {x_on}; net(X) is on {x_on}" in out


def skip_without_virtual_devices(backend: str, virtual: str) -> None:
    if virtual != "0" and not SPECS[backend].virtual_devices:
        pytest.skip(f"{SPECS[backend].title} has no virtual devices")


@pytest.mark.parametrize("backend", EVERY)
@pytest.mark.parametrize("virtual", ["2", "0"], ids=["two-virtual-gpus", "as-is"])
def test_check_gpu_says_where_exp_ran_and_what_skipping_the_copy_back_saves(backend, virtual):
    skip_without_virtual_devices(backend, virtual)
    out = run_example("check_gpu.py", backend, "--iters", "20", DEVSHIM_VIRTUAL_DEVICES=virtual)
    assert f"{backend}: exp() of 230400 float32 numbers, 20 times, on " in out
    assert "returning a NumPy array each time (copied to the host):" in out
    assert "returning a handle on the device (no copy back):" in out and "as fast)" in out
    assert "result is [1.23178 1.61879 1.52278 ... 2.20772 2.29968 1.62323]" in out  # Theano's numbers
    if virtual == "2":
        expected = "used a virtual GPU, which computes on the CPU (device_of(result) is gpu:0)"
    elif real_gpus(backend):  # a GPU the framework itself sees (NumPy has none)
        expected = "used the GPU (device_of(result) is gpu:0)"
    else:
        expected = "used the CPU (device_of(result) is cpu:0)"
    assert expected in out


@pytest.mark.parametrize("backend", EVERY)
@pytest.mark.parametrize("virtual", ["2", "0"], ids=["two-virtual-gpus", "as-is"])
def test_logging_on_gpu_counts_the_implicit_copies_of_logging_each_step(backend, virtual):
    skip_without_virtual_devices(backend, virtual)
    out = run_example("logging_on_gpu.py", backend, "--steps", "20", DEVSHIM_VIRTUAL_DEVICES=virtual)
    if virtual == "2" or real_gpus(backend):  # a virtual GPU, or a real one the framework sees
        assert "on gpu:0, logging the norm of each" in out and "logged to the host every step:" in out
        if SPECS[backend].capabilities()["guard"]:
            assert "s, 20 implicit copies to the host" in out
        else:  # CuPy on a real GPU (an H200 printed "0 implicit copies" here, as if there were none)
            assert ("s, 0 implicit copies to the host counted: ds.transfer_guard does not watch "
                    f"{SPECS[backend].title}'s host reads") in out
    else:
        assert "on cpu:0, logging the norm of each" in out
        assert "0 implicit copies to the host (none: the CPU is the host)" in out
    assert "logged on the device, moved once:" in out and "1 explicit copy (ds.to_numpy)" in out
    assert "both logs hold the same 20 norms" in out


@pytest.mark.parametrize("backend", sorted(named_in("model_parallel.py")))
def test_model_parallel_example_under_a_disallowing_guard(backend):
    out = run_example("model_parallel.py", backend, DEVSHIM_TRANSFER_GUARD="disallow")
    assert f"{backend}: the split model's output equals the single-device model's: True" in out
    assert f"{backend}: and so do the gradients, which flowed back across the copies: True" in out
    if SPECS[backend].virtual_devices:
        assert f"{backend}: first stage on gpu:0 and gpu:1" in out


@pytest.mark.parametrize("backend", sorted(named_in("data_parallel.py")))
def test_data_parallel_example_under_a_disallowing_guard(backend):
    out = run_example("data_parallel.py", backend, DEVSHIM_TRANSFER_GUARD="disallow")
    assert f"{backend}: every replica's weights equal the single-device step's: True" in out
    if SPECS[backend].virtual_devices:
        assert "shards of [5, 4] on ['gpu:0', 'gpu:1']" in out


@pytest.mark.parametrize("backend", named_in("custom_function.py"))
@pytest.mark.parametrize("virtual", ["2", "0"], ids=["two-virtual-gpus", "as-is"])
def test_custom_function_checks_the_tutorials_functions_on_every_device(backend, virtual):
    """Chainer's ExpAdd and MulAdd, forward and backward written once with xp, as each framework's
    custom-gradient function: check_backward passes them and catches a wrong backward, on the CPU
    and on each virtual GPU, under a disallowing transfer guard."""
    skip_without_virtual_devices(backend, virtual)
    out = run_example("custom_function.py", backend, DEVSHIM_VIRTUAL_DEVICES=virtual)
    if not load_harness(backend).has_autograd:
        assert out.splitlines() == [f"{backend}: ExpAdd's backward on cpu:0 equals numerical_grad's",
                                    f"{backend}: check_backward refuses: {SPECS[backend].title} has no automatic "
                                    f"differentiation"]
        return
    if virtual == "2":
        places = ["cpu:0", "gpu:0 (virtual)", "gpu:1 (virtual)"]
    else:  # the CPU and each GPU the framework itself sees
        places = ["cpu:0"] + [f"gpu:{i}" for i in range(real_gpus(backend))]
    for where in places:
        assert f"{backend}: ExpAdd and MulAdd on {where}: check_backward passed" in out
        assert f"{backend}: ExpAdd(x, y) on {where} equals NumPy's exp(x) + exp(y)" in out
        assert (f"{backend}: a wrong ExpAdd backward on {where} is caught: The gradient of input 0 (of 2: {backend} "
                f"float32 (3, 2) on {where}) differs from the numerical gradient") in out
    assert len(out.splitlines()) == 3 * len(places)


@pytest.mark.parametrize("hide_gpus", [False, True], ids=["as-is", "DEVSHIM_DEVICE=cpu"])
def test_generic_softplus_example_runs_on_every_installed_framework(hide_gpus):
    env = {"DEVSHIM_DEVICE": "cpu"} if hide_gpus else {}
    result = run_python("", str(EXAMPLES / "generic_softplus.py"), timeout=300, **env)
    assert result.returncode == 0, result.stderr
    printed = [line.split()[0] for line in result.stdout.splitlines()]
    # A framework whose arrays live on its GPU alone (its host arrays another's: CuPy's are NumPy's)
    # needs one: with the GPUs hidden it is left out.
    expected = [name for name in named_in("generic_softplus.py") if name in ds.available_backends()
                and (SPECS[name].host_partner is None or not hide_gpus and real_gpus(name))]
    assert printed == expected


@pytest.mark.parametrize("virtual", [None, "2"], ids=["as-is", "two-virtual-gpus"])
def test_the_plugin_project_runs_its_tests_on_every_installed_backend(virtual):
    """examples/plugin_project, run as its user would: pytest in its folder, through devshim's
    pytest plugin, on every installed backend, then on two virtual GPUs."""
    args = ["-m", "pytest", str(EXAMPLES / "plugin_project"), "-v", "-p", "no:cacheprovider",
            "--devshim-backend", "all"]
    if virtual:
        args += ["--devshim-virtual-devices", virtual]
    result = run_python("", *args, PYTHONDONTWRITEBYTECODE="1", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    outcomes = {line.split()[0].rsplit("/", 1)[1]: line.split()[1]
                for line in result.stdout.splitlines() if "test_rowstats.py::" in line.split(" ")[0]}
    expected = {}
    for name in ds.available_backends():
        devices = next(line for line in result.stdout.splitlines() if line.startswith(f"devshim {name} devices:"))
        # A backend without virtual devices (NumPy) runs on its CPU in the virtual run, as on a GPU machine.
        two = devices.count("gpu:") >= 2
        expected[f"test_rowstats.py::test_on_one_device[{name}]"] = "PASSED"
        expected[f"test_rowstats.py::test_split_over_two_gpus[{name}]"] = "PASSED" if two else "SKIPPED"
    if "torch" in ds.available_backends():
        expected["test_rowstats.py::test_gradients_flow_back_across_the_split[torch]"] = "PASSED"
    else:
        expected["test_rowstats.py::test_gradients_flow_back_across_the_split[no-backend]"] = "SKIPPED"
    assert outcomes == expected, result.stdout
    if virtual:
        assert f"{virtual} virtual GPUs (--devshim-virtual-devices {virtual})" in result.stdout


def test_largest_batch_plans_the_batch_that_fits_and_a_virtual_gpu_agrees():
    pytest.importorskip("torch")
    out = run_example("largest_batch.py", "torch", "--size", "8MiB", "--hidden", "64")
    largest = int(out.split("the largest batch that fits is ")[1].split(",")[0])
    assert f"on a virtual GPU of 8.00 MiB: batch {largest} fits" in out
    assert f"batch {largest + 1} does not fit: OutOfMemoryError" in out

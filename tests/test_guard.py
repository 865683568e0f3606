"""ds.transfer_guard: the API (levels, nesting, reports, warnings, errors, threads, tasks,
DEVSHIM_TRANSFER_GUARD), and what is specific to each framework's hooks."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import warnings
from pathlib import Path

import pytest

import devshim as ds
from devshim import guard, settings, transfer
from devshim.guard import marker
from helpers import run_python

GPU, CPU = ds.Device("gpu", 0), ds.Device("cpu")


def read(state=None):
    """What a backend hook does for a host read of a tensor on gpu:0."""
    guard.implicit("device_to_host", guard.READ, "float(t)", GPU, CPU, state)


def op():
    guard.implicit("device_to_device", guard.OP_INPUT, "add", ds.Device("gpu", 1), GPU)


# ------------------------------------------------------------ levels


@pytest.mark.parametrize("kwargs", [{"level": "forbid"}, {"device_to_host": "never"}, {"level": "LOG"}])
def test_an_unknown_level_lists_the_valid_ones(kwargs):
    with pytest.raises(ds.InvalidGuardLevelError, match="Valid levels: 'allow', 'log', 'disallow'") as info:
        ds.transfer_guard(**kwargs)
    assert isinstance(info.value, ValueError)


def test_disallow_raises_the_named_errors():
    with ds.transfer_guard("disallow") as report:
        with pytest.raises(ds.ImplicitTransferError, match=r"float\(t\) reads a tensor on gpu:0.*ds.to_numpy"):
            read()
        with pytest.raises(ds.DeviceMismatchError, match=r"add has inputs on gpu:1 and on gpu:0.*ds.copy_if_needed"):
            op()
    assert report.counts == {"cross-device op input": 1, "device-to-host read": 1, "host-to-device": 0}
    assert report.total == 2 and {e.action for e in report.events} == {"refused"}


def test_log_warns_once_per_call_site_and_counts_every_time():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ds.transfer_guard("log") as report:
            for _ in range(4):
                guard.implicit("device_to_host", guard.READ, "float(t)", GPU, CPU)  # one call site
            guard.implicit("device_to_host", guard.READ, "float(t)", GPU, CPU)  # another
    assert report.total == 5
    assert len(caught) == 2 and all(issubclass(w.category, ds.ImplicitTransferWarning) for w in caught)
    assert caught[0].filename == __file__  # the warning points at the code that made the transfer
    lines = str(report).splitlines()
    assert lines[0].startswith("5 implicit transfers (device_to_host=log")
    assert any(line.split()[2] == "4" for line in lines[1:])  # "device-to-host read  4  float(t) ..."


def test_allow_checks_nothing():
    with ds.transfer_guard("allow") as report:
        read()
    assert report.total == 0 and not guard.current().checking


def test_per_direction_levels_override_and_inherit():
    with ds.transfer_guard("disallow"):
        with ds.transfer_guard(device_to_host="log") as inner:
            assert guard.current().device_to_device == "disallow"  # inherited
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                read()  # logged, not refused
            with pytest.raises(ds.DeviceMismatchError):
                op()
    assert inner.levels == {"device_to_host": "log", "device_to_device": "disallow", "host_to_device": "disallow"}


def test_nested_blocks_restore_the_outer_levels_also_on_exceptions():
    with ds.transfer_guard("log") as outer:
        with pytest.raises(ZeroDivisionError):
            with ds.transfer_guard("disallow"):
                1 / 0
        assert guard.current().device_to_host == "log"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            read()
    assert guard.current().device_to_host == settings.default_guard_level()
    assert outer.total == 1


def test_an_outer_report_sees_what_inner_blocks_saw():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with ds.transfer_guard("log") as outer:
            with ds.transfer_guard("log") as inner:
                read()
            read()
    assert (inner.total, outer.total) == (1, 2)


def test_explicit_transfers_are_never_counted():
    with ds.transfer_guard("disallow") as report:
        with transfer.explicit():
            read()
            op()
    assert report.total == 0


def test_the_same_guard_object_can_be_reentered():
    block = ds.transfer_guard("disallow")
    with block:
        with block:
            assert guard.current().checking
        assert guard.current().checking
    assert guard.current().device_to_host == settings.default_guard_level()


# ------------------------------------------------------------ isolation


def test_a_guard_in_one_thread_does_not_reach_another():
    seen = {}
    inside, done = threading.Event(), threading.Event()

    def other():
        inside.wait(10)
        seen["level"] = guard.current().device_to_host
        try:
            read()
            seen["read"] = "allowed"
        except ds.ImplicitTransferError:
            seen["read"] = "refused"
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with ds.transfer_guard("disallow"):
        inside.set()
        done.wait(10)
    thread.join(10)
    assert seen == {"level": settings.default_guard_level(), "read": "allowed"}


def test_a_guard_in_one_asyncio_task_does_not_reach_another():
    async def guarded(started, proceed):
        with ds.transfer_guard("disallow"):
            started.set()
            await proceed.wait()
            return guard.current().device_to_host

    async def bystander(started, proceed):
        await started.wait()
        level = guard.current().device_to_host
        proceed.set()
        return level

    async def main():
        started, proceed = asyncio.Event(), asyncio.Event()
        return await asyncio.gather(guarded(started, proceed), bystander(started, proceed))

    assert asyncio.run(main()) == ["disallow", "allow"]


# ------------------------------------------------------------ the process default


def test_the_variable_sets_the_process_default(setenv):
    setenv("DEVSHIM_TRANSFER_GUARD", "disallow")
    with pytest.raises(ds.ImplicitTransferError):
        read()
    with ds.transfer_guard("allow"):
        read()
    setenv("DEVSHIM_TRANSFER_GUARD", None)
    read()


def test_a_bad_variable_value_is_a_named_error(monkeypatch):
    """In a running process, the reload that reads a misspelt level raises, with the valid levels;
    so does entering a block, until the variable is fixed."""
    ds.num_gpus()  # devshim in use
    monkeypatch.setenv("DEVSHIM_TRANSFER_GUARD", "sometimes")
    with pytest.raises(ds.InvalidGuardLevelError, match="DEVSHIM_TRANSFER_GUARD='sometimes'.*allow, log, disallow"):
        ds.settings.reload()
    with pytest.raises(ds.InvalidGuardLevelError, match="DEVSHIM_TRANSFER_GUARD='sometimes'"):
        ds.transfer_guard().__enter__()
    monkeypatch.setenv("DEVSHIM_TRANSFER_GUARD", "allow")
    ds.settings.reload()
    with ds.transfer_guard():
        pass


def test_a_misspelt_variable_fails_at_first_use_of_devshim():
    """Not only when a guard block is entered: the run must not go unguarded without a word."""
    import subprocess
    import sys

    env = dict(os.environ, DEVSHIM_TRANSFER_GUARD="disalow")
    code = ("import devshim as ds\n"
            "for attempt in range(2):\n"
            "    try:\n        ds.num_gpus()\n"
            "    except ds.InvalidGuardLevelError as err:\n        print('refused', err)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("refused DEVSHIM_TRANSFER_GUARD='disalow'") for line in lines)
    assert "allow, log, disallow" in lines[0]


#: The backends with a transfer guard (a guard.py), as the registry has them.
GUARDED = [name for name, spec in ds.backends.specs().items() if spec.has_module("guard")]
TESTS = str(Path(__file__).resolve().parent)


@pytest.mark.same_in_every_pass  # a fresh interpreter that names its backend and virtual GPUs
@pytest.mark.parametrize("framework", [name for name in GUARDED if ds.backends.specs()[name].virtual_devices])
def test_the_variable_guards_a_fresh_process(framework):
    """DEVSHIM_TRANSFER_GUARD=disallow, and nothing else: the first implicit read of a tensor on a
    (virtual) GPU is refused, in a process that never entered a block."""
    if not ds.backends.specs()[framework].is_installed():
        pytest.skip(f"{framework} is not installed in this environment")
    code = (f"import sys\nsys.path.insert(0, {TESTS!r})\n"
            "import devshim as ds\nfrom devshim_conformance import load_harness\n"
            f"harness = load_harness({framework!r})\n"
            "try:\n    x = harness.tensor(1.0, device=ds.gpu(0))\n"
            "except ds.DevshimError as err:\n    print('no GPU:', err)\n    raise SystemExit(0)\n"
            "how, read = harness.host_reads()[0]\n"
            "try:\n    read(x)\n"
            "except ds.ImplicitTransferError as err:\n    print('refused', 'gpu:0' in str(err))\n")
    result = run_python(code, DEVSHIM_BACKEND=framework, DEVSHIM_TRANSFER_GUARD="disallow", DEVSHIM_VIRTUAL_DEVICES="1")
    assert result.returncode == 0, result.stderr
    if result.stdout.startswith("no GPU:"):  # virtual GPUs this release of the framework cannot present
        pytest.skip(result.stdout.strip())
    assert result.stdout.split() == ["refused", "True"]


@pytest.mark.parametrize("framework", GUARDED)
def test_a_guard_entered_before_its_backend_loads_wraps_once_and_unwraps(framework):
    # The first device call inside the block loads the backend, whose registry hook installs
    # the guard again while the block's own install is running: the wrappers must not nest,
    # and none may stay once the block ends. Where the hooks put wrappers, they say (patches());
    # an attribute the framework lacked (JAX's __array_ufunc__) is added, not wrapped: it must go.
    pytest.importorskip(ds.backends.specs()[framework].import_name)
    code = (
        "import json, devshim as ds\n"
        "from devshim.guard.hooks import is_wrapper, original_of\n"
        "def depths(entries):\n"
        "    found = []\n"
        "    for owner, name in entries:\n"
        "        fn, depth = getattr(owner, name), 0\n"
        "        fn = getattr(fn, 'fget', fn)\n"
        "        while is_wrapper(fn):\n"
        "            fn, depth = getattr(original_of(fn), 'fget', original_of(fn)), depth + 1\n"
        "        found.append(depth)\n"
        "    return found\n"
        "with ds.transfer_guard('disallow'):\n"
        "    ds.try_gpu()\n"
        f"    hooks = ds.backends.guard_hooks({framework!r})\n"
        "    added = [(owner, name) for owner, name in hooks.patches()\n"
        "             if hooks.original(owner, name) is None and not is_wrapper(getattr(owner, name))]\n"
        "    entries = [entry for entry in hooks.patches() if entry not in added]\n"
        "    inside = depths(entries)\n"
        "print(json.dumps([inside, depths(entries), [name in vars(owner) for owner, name in added]]))\n"
    )
    result = run_python(code, DEVSHIM_BACKEND=framework)
    assert result.returncode == 0, result.stderr
    inside, after, added_left = json.loads(result.stdout.strip().splitlines()[-1])
    assert inside and inside == [1] * len(inside)
    assert after == [0] * len(inside)
    assert not any(added_left)


# ------------------------------------------------------------ torch specifics (cpu vs meta)


def test_torch_meta_reads_and_mixed_ops():
    torch = pytest.importorskip("torch")
    meta, host = torch.ones(3, device="meta"), torch.ones(3)
    with ds.transfer_guard("disallow") as report:
        with pytest.raises(ds.ImplicitTransferError, match=r"t\.item\(\) reads a tensor on meta:0"):
            meta.item()
        with pytest.raises(ds.DeviceMismatchError, match="host-to-device"):
            host + meta
        assert float(host.sum()) == 3.0 and (host + torch.tensor(2.0)).sum().item() == 9.0  # 0-d host: a number
    assert report.counts == {"cross-device op input": 0, "device-to-host read": 1, "host-to-device": 1}
    with ds.transfer_guard("allow"):
        with pytest.raises(RuntimeError) as native:
            host + meta  # PyTorch refuses mixed devices itself
    assert not isinstance(native.value, ds.DevshimError)


def test_torch_hooks_are_in_only_while_a_guard_checks():
    torch = pytest.importorskip("torch")
    ds.neutral_device(torch.ones(1))  # the torch backend is loaded
    own = torch.Tensor.__dict__.get("item")
    with ds.transfer_guard("disallow"):
        assert torch.Tensor.__dict__.get("item") is not own
        assert marker.watchers >= 1
        with ds.transfer_guard("allow"):
            pass
    assert torch.Tensor.__dict__.get("item") is own
    assert torch.overrides._get_current_function_mode_stack() == []


def test_torch_cpu_index_into_another_device_is_an_implicit_copy():
    torch = pytest.importorskip("torch")
    meta = torch.ones(4, device="meta")
    with ds.transfer_guard("disallow"):
        with pytest.raises(ds.DeviceMismatchError):
            meta[torch.tensor([0, 1])]
        meta[torch.tensor(1)]  # a 0-d index is a number


def test_tensorflow_ops_in_one_place_pass_and_shapes_stay_on_the_host():
    tf = pytest.importorskip("tensorflow")
    from harnesses.tensorflow_harness import HARNESS  # noqa: F401  (configures virtual devices first)

    with ds.use_backend("tensorflow"):
        x = tf.ones((2, 3))
        with ds.transfer_guard("disallow") as report:
            y = tf.reshape(x * 2.0 + tf.constant(1.0), tf.constant([3, 2]))
            v = tf.Variable([1.0])
            v.assign_add([1.0])
            float(tf.reduce_sum(y))  # a host tensor: no transfer
    assert report.total == 0


# ------------------------------------------------------------ one block object, many contexts (issue 19)


def test_one_block_object_entered_from_several_threads_gives_each_its_own_entry():
    block = ds.transfer_guard("disallow")
    inside, leave = threading.Barrier(4), threading.Barrier(4)
    seen, errors = [], []

    def worker():
        try:
            with block:
                inside.wait(timeout=30)  # all four threads inside the one object at once
                seen.append(guard.current().device_to_host)
                leave.wait(timeout=30)
            seen.append(guard.current().device_to_host)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert sorted(seen) == ["allow"] * 4 + ["disallow"] * 4


def test_one_block_object_entered_from_interleaved_tasks_gives_each_its_own_entry():
    block = ds.transfer_guard("log")

    async def task(started, release):
        with block:
            started.set()
            await release.wait()
            level = guard.current().device_to_host
        return level, guard.current().device_to_host

    async def main():
        first_in, second_in, release_first, release_second = (asyncio.Event() for _ in range(4))
        first = asyncio.create_task(task(first_in, release_first))
        await first_in.wait()
        second = asyncio.create_task(task(second_in, release_second))
        await second_in.wait()
        release_first.set()  # the first entered exits first: no token from another context
        a = await first
        release_second.set()
        return a, await second

    assert asyncio.run(main()) == (("log", "allow"), ("log", "allow"))


def test_exiting_a_block_object_in_a_context_that_did_not_enter_it_is_a_named_error():
    import contextvars

    block = ds.transfer_guard("log")
    block.__enter__()
    try:
        with pytest.raises(ds.GuardBlockInUseError, match="one per thread or task") as info:
            contextvars.Context().run(block.__exit__, None, None, None)
        assert isinstance(info.value, RuntimeError)
    finally:
        block.__exit__(None, None, None)
    assert guard.current().device_to_host == "allow"

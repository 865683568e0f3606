"""What is specific to the JAX adapter: jax.Device objects, copies that are new buffers,
tracers under jit and grad, sharded arrays, and host devices configured before JAX starts."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

import devshim as ds

jax = pytest.importorskip("jax")
# Importing the harness applies DEVSHIM_VIRTUAL_DEVICES before any array below exists.
from harnesses.jax_harness import HARNESS  # noqa: E402,F401
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402

from devshim.backends.jax.core import JaxBackend  # noqa: E402
from helpers import run_python as run_fresh  # noqa: E402
from machine import real_gpus  # noqa: E402


@pytest.fixture(autouse=True)
def bk():
    with ds.use_backend("jax") as adapter:
        yield adapter


def run_python(code: str, **env: str):
    """Run ``code`` in a fresh interpreter (a fresh JAX) with only ``env``'s DEVSHIM_ variables."""
    return run_fresh(code, DEVSHIM_BACKEND="jax", **env)


def pointer(x) -> int:
    return x.unsafe_buffer_pointer()


def only_device(x):
    """The one device of a single-device array (x.devices(): JAX before 0.4.31 has no x.device)."""
    (device,) = x.devices()
    return device


# ------------------------------------------------------------ devices are jax.Device objects


def test_devices_are_jax_devices_that_jax_takes():
    assert ds.cpu() is jax.local_devices(backend="cpu")[0]
    assert all(isinstance(d, jax.Device) for d in ds.devices() + ds.try_all_gpus())
    x = jax.device_put(jnp.ones((2, 3)), ds.try_gpu())
    assert only_device(x) is ds.try_gpu()
    assert ds.neutral_device(x) == ds.try_gpu() and ds.neutral_device(x).native is ds.try_gpu()


def test_without_an_accelerator_num_gpus_is_zero_and_nothing_raises():
    if ds.get_backend().accelerator_count():
        pytest.skip("JAX sees an accelerator here")
    assert ds.get_backend().accelerator_count() == 0
    assert ds.get_backend().accelerator_platform() is None
    if not ds.settings.virtual_device_count():
        assert ds.num_gpus() == 0 and ds.try_gpu() is ds.cpu() and ds.try_all_gpus() == [ds.cpu()]


class FakeDevice:
    """Stands in for a jax.Device of a platform this machine lacks (hashable, like the real one)."""

    def __init__(self, platform: str, index: int) -> None:
        self.platform, self.id, self.device_kind = platform, index, f"fake {platform}"
        self.client = types.SimpleNamespace(platform_version="fake")


def fake_accelerators(monkeypatch, platform: str, count: int, default=None):
    """Make JAX's default backend ``platform`` with ``count`` fake devices; CPU devices stay real."""
    fakes = [FakeDevice(platform, i) for i in range(count)]
    real_local_devices = jax.local_devices

    def local_devices(backend=None):
        return fakes if backend == platform else real_local_devices(backend=backend)

    monkeypatch.setattr(jax, "default_backend", default or (lambda: platform))
    monkeypatch.setattr(jax, "local_devices", local_devices)
    return fakes


def test_a_tpu_counts_as_the_accelerator(monkeypatch):
    fakes = fake_accelerators(monkeypatch, "tpu", 2)
    adapter = JaxBackend()
    assert adapter.accelerator_count() == 2 and adapter.accelerator_platform() == "tpu"
    d = adapter.describe(fakes[1])
    assert (str(d), d.platform, d.native) == ("gpu:1", "tpu", fakes[1])
    assert adapter.describe(adapter.cpu()) == "cpu"


def test_jax_gpu_devices_are_cuda_or_rocm_by_their_client(monkeypatch):
    fakes = fake_accelerators(monkeypatch, "gpu", 1)
    adapter = JaxBackend()
    assert adapter.accelerator_platform() == "cuda"
    fakes[0].client.platform_version = "rocm 60300"
    assert JaxBackend().accelerator_platform() == "rocm"


def test_a_platform_that_fails_to_start_means_no_accelerator(monkeypatch):
    def broken():
        raise RuntimeError("Unable to initialize backend 'cuda'")

    fake_accelerators(monkeypatch, "gpu", 1, default=broken)
    assert JaxBackend().accelerator_count() == 0


def test_jax_has_no_meta_device():
    with pytest.raises(ds.DeviceUnavailableError, match="meta"):
        ds.device("meta")


# ------------------------------------------------------------ copies


def test_to_device_makes_a_new_buffer_where_device_put_hands_the_same_one_back():
    x = jax.device_put(jnp.arange(4.0), ds.cpu())
    assert pointer(jax.device_put(x, ds.cpu())) == pointer(x)  # why devshim does not stop there
    y = ds.to_device(x, ds.cpu())
    assert pointer(y) != pointer(x) and only_device(y) is ds.cpu()
    assert getattr(y, "committed", True)  # put on a device: committed there (JAX 0.4.31+ says so)
    np.testing.assert_array_equal(np.asarray(y), [0.0, 1.0, 2.0, 3.0])


def test_copy_if_needed_returns_the_array_itself_committed_or_not():
    committed = jax.device_put(jnp.ones(3), ds.cpu())
    default_placed = jnp.ones(3)  # uncommitted, on JAX's default device
    assert ds.copy_if_needed(committed, ds.cpu()) is committed
    assert ds.copy_if_needed(default_placed, ds.neutral_device(default_placed)) is default_placed
    assert ds.copy_if_needed({"w": committed}, "cpu")["w"] is committed


def test_copies_work_without_may_alias_on_older_jax():
    """JAX before device_put(may_alias=...) still gets a copy in new storage."""
    adapter = JaxBackend()
    adapter.__dict__["_fw"] = types.SimpleNamespace(
        device_put=lambda x, device: jax.device_put(x, device), numpy=jnp)
    x = jax.device_put(jnp.arange(3.0), ds.cpu())
    y = adapter.copy_to(x, ds.cpu(), False)
    assert pointer(y) != pointer(x) and only_device(y) is ds.cpu()
    np.testing.assert_array_equal(np.asarray(y), [0.0, 1.0, 2.0])


def test_a_copy_is_a_copy_where_may_alias_false_still_aliases():
    """JAX 0.4.34 to 0.5.3 take device_put(..., may_alias=False) and hand the same buffer back on
    the array's own device: devshim tries it once and copies there itself."""
    def aliasing_device_put(x, device, may_alias=None):
        return jax.device_put(x, device)  # what those releases did with may_alias=False

    adapter = JaxBackend()
    adapter.__dict__["_fw"] = types.SimpleNamespace(
        device_put=aliasing_device_put, numpy=jnp, transfer_guard=jax.transfer_guard,
        ensure_compile_time_eval=jax.ensure_compile_time_eval)
    x = jax.device_put(jnp.arange(3.0), ds.cpu())
    y = adapter.copy_to(x, ds.cpu(), False)
    assert pointer(y) != pointer(x) and only_device(y) is ds.cpu()
    y.delete()
    np.testing.assert_array_equal(np.asarray(x), [0.0, 1.0, 2.0])


def test_deleting_a_copy_leaves_the_original_alive():
    """Donating or deleting what to_device returned must not free its source (it did on JAX 0.5.3,
    whose device_put(may_alias=False) aliased)."""
    x = jax.device_put(jnp.arange(3.0), ds.cpu())
    copies = [ds.to_device(x, ds.device_of(x)), ds.to_device({"w": x}, ds.device_of(x))["w"]]
    for copy in copies:
        copy.delete()
    assert not x.is_deleted()
    np.testing.assert_array_equal(np.asarray(x), [0.0, 1.0, 2.0])


def test_to_numpy_owns_its_memory_and_keeps_bfloat16():
    x = jnp.array([1.5, -2.0], dtype=jnp.bfloat16)
    host = ds.to_numpy(x)
    assert host.dtype == ml_dtypes.bfloat16 and host.flags.writeable and host.flags.owndata
    host[0] = 7
    assert float(x[0]) == 1.5


def test_device_of_is_answered_from_the_device_table():
    x = jax.device_put(jnp.ones(2), ds.cpu())
    first = ds.neutral_device(x)
    assert ds.get_backend().device_table()[x.sharding] is first
    assert ds.neutral_device(jax.device_put(jnp.zeros(5), ds.cpu())) is first


# ------------------------------------------------------------ tracers: jit and grad


def test_to_device_and_copy_if_needed_work_inside_jit():
    """Inside jit they record a device_put; where the outputs land is the compiled
    computation's business (docs/jax.md): move them after the call to be sure."""
    target = ds.try_gpu(ds.num_gpus() - 1) if ds.num_gpus() else ds.cpu()
    x = jax.device_put(jnp.arange(3.0), ds.cpu())

    @jax.jit
    def f(t):
        return ds.to_device(t, target) * 2.0, ds.copy_if_needed(t + 1.0, target)

    doubled, shifted = f(x)
    np.testing.assert_array_equal(np.asarray(doubled), [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(np.asarray(shifted), [1.0, 2.0, 3.0])
    for y in (doubled, shifted):
        assert ds.neutral_device(y) in (ds.neutral_device(x), ds.device(target))
        assert ds.neutral_device(ds.copy_if_needed(y, target)) == ds.device(target)


def test_gradients_flow_through_copies_under_jit_and_grad():
    def loss(w):
        moved = ds.to_device(w * 3.0, ds.try_gpu())
        back = ds.copy_if_needed(moved, ds.cpu())
        return jnp.sum(back * 2.0)

    w = jnp.array([1.0, 2.0])
    np.testing.assert_allclose(jax.grad(loss)(w), [6.0, 6.0])
    np.testing.assert_allclose(jax.jit(jax.grad(loss))(w), [6.0, 6.0])


@pytest.mark.parametrize("transform", ["jit", "grad", "vmap"])
def test_a_tracer_has_no_device_and_no_values(transform):
    seen = {}

    def f(t):
        # issue 18: device_of answers None for a tracer, as array-api-compat does; the neutral
        # Device has no such answer, so neutral_device still raises.
        seen["native"] = ds.device_of(t)
        for name, call in (("device_of", ds.neutral_device), ("to_numpy", ds.to_numpy)):
            with pytest.raises(ds.UnplacedTensorError, match="JAX tracer") as info:
                call(t)
            seen[name] = info.value
        return jnp.sum(t)

    wrapped = {"jit": jax.jit(f), "grad": jax.grad(f), "vmap": jax.vmap(f)}[transform]
    wrapped(jnp.ones((2, 2)))
    assert seen["native"] is None
    assert isinstance(seen["device_of"], RuntimeError) and "has no device" in str(seen["device_of"])
    assert "has no values" in str(seen["to_numpy"])


def test_synchronize_waits_for_a_value_and_skips_tracers():
    y = jnp.ones((64, 64)) @ jnp.ones((64, 64))
    ds.synchronize(y)
    assert y.is_ready()
    jax.jit(lambda t: (ds.synchronize(t), t)[1])(y)  # nothing to wait for while tracing


# ------------------------------------------------------------ several host devices, fresh processes


def test_virtual_gpus_beside_a_real_gpu_leave_it_working():
    """Testing 4-GPU code on a 1-GPU workstation: devshim's gpu:i are the virtual GPUs (JAX host
    devices), and the real GPU keeps working through its own jax.Device, to and from a virtual one."""
    if not real_gpus("jax"):
        pytest.skip("needs a GPU JAX itself sees: virtual GPUs beside a real one")
    result = run_python("""
        import jax, jax.numpy as jnp, numpy as np
        import devshim as ds

        assert ds.num_gpus() == 2 and ds.neutral_device(jnp.ones(1)).virtual  # devshim's gpu:0, the default
        real = next(d for d in jax.devices() if d.platform != "cpu")
        x = jax.device_put(np.arange(6.0, dtype=np.float32), real)
        assert not ds.neutral_device(x).virtual and ds.device_of(x) == real
        on_virtual = ds.to_device(x, ds.try_gpu(1))
        back = ds.to_device(on_virtual, real)
        assert ds.neutral_device(on_virtual).virtual and ds.device_of(back) == real
        assert ds.memory(ds.try_gpu(1)).in_use >= on_virtual.nbytes  # JAX's default backend is the real GPU's
        np.testing.assert_array_equal(ds.to_numpy(back), np.arange(6.0))
        assert ds.copy_if_needed(x, real) is x
        ds.synchronize(x)
        assert ds.benchmark(lambda: x * 2, warmup=1, min_run_time=0.01).median > 0
        print("BESIDE OK")
    """, DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    assert "BESIDE OK" in result.stdout


def test_the_memory_of_a_virtual_gpu_counts_its_arrays_whatever_jaxs_default_backend():
    """Beside a real GPU, JAX's default backend is the GPU's, and `jax.live_arrays()` lists that
    backend's arrays only: a virtual GPU's (a host device's) must be asked of its own platform.
    Here JAX's default backend is made to list nothing, as a GPU's would list none of the host's."""
    result = run_python("""
        import jax, numpy as np
        import devshim as ds

        listed = jax.live_arrays
        jax.live_arrays = lambda platform=None: listed(platform) if platform == "cpu" else []
        x = ds.to_device(np.ones((256, 1024), dtype=np.float32), ds.gpu(1))  # 1 MiB on virtual gpu:1
        used = ds.memory(ds.gpu(1)).in_use
        assert used >= x.nbytes, used
        with ds.memory_peak(ds.gpu(0)) as peak:
            y = ds.to_device(x, ds.gpu(0))
        assert peak.added is None or peak.added >= y.nbytes, peak
        print("COUNTED", used)
    """, DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    assert "COUNTED" in result.stdout


def test_sharded_arrays_have_no_one_device_and_are_gathered_by_to_device():
    result = run_python("""
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        import devshim as ds

        cpus = jax.local_devices(backend="cpu")
        assert len(cpus) == 4 and ds.num_gpus() == 0
        assert ds.device("cpu:3") is cpus[3] and str(ds.neutral_device(jax.device_put(jnp.ones(1), cpus[2]))) == "cpu:2"
        mesh = Mesh(np.array(cpus[:2]), ("batch",))
        for spec in (P("batch"), P()):          # sharded, then replicated
            x = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, spec))
            try:
                ds.neutral_device(x)
            except ds.MultiDeviceValueError as err:
                assert isinstance(err, ds.UnsupportedValueError) and "cpu:0, cpu:1" in str(err)
            else:
                raise AssertionError("a sharded array has no one device")
            y = ds.to_device(x, "cpu:3")
            assert str(ds.neutral_device(y)) == "cpu:3"
            z = ds.copy_if_needed(x, ds.cpu())
            assert z is not x and str(ds.neutral_device(z)) == "cpu:0"
            np.testing.assert_array_equal(ds.to_numpy(x), np.arange(8.0))
        one = jax.device_put(jnp.ones(2), NamedSharding(Mesh(np.array(cpus[1:2]), ("a",)), P()))
        assert str(ds.neutral_device(one)) == "cpu:1" and ds.copy_if_needed(one, "cpu:1") is one
        assert ds.device_of(one) is cpus[1]  # one device: its jax.Device, not the sharding
        print("SHARDED OK")
    """, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")  # CPU devices alone, on a GPU machine too
    assert result.returncode == 0, result.stderr
    assert "SHARDED OK" in result.stdout


def test_the_d2l_flow_on_two_virtual_gpus():
    result = run_python("""
        import jax, jax.numpy as jnp, numpy as np
        import devshim as ds

        assert ds.num_gpus() == 2        # devshim configures JAX before JAX starts
        hosts = jax.local_devices(backend="cpu")
        assert len(hosts) == 3
        assert ds.try_all_gpus() == [hosts[1], hosts[2]] and ds.cpu() is hosts[0]
        X = jax.device_put(jnp.ones((2, 3)), ds.try_gpu())
        Y = jax.device_put(jnp.full((2, 3), 2.0), ds.try_gpu(1))
        Z = ds.to_device(X, ds.try_gpu(1))
        assert repr(ds.neutral_device(Z)) == "Device('gpu:1', backend='jax', virtual=True)"
        assert str(ds.neutral_device(X)) == "gpu:0" and ds.neutral_device(Z) == ds.try_gpu(1)
        assert ds.same_device(Y, Z) and not ds.same_device(X, Y)
        assert Z.unsafe_buffer_pointer() != X.unsafe_buffer_pointer()
        np.testing.assert_array_equal(np.asarray(Y + Z), np.full((2, 3), 3.0))
        assert ds.copy_if_needed(Z, ds.try_gpu(1)) is Z
        assert str(ds.neutral_device(jnp.ones(1))) == "gpu:0"     # the default device, as on a GPU machine
        assert jax.config.jax_default_device is ds.try_gpu() and ds.try_gpu() is hosts[1]
        try:
            ds.device("cpu:1")
        except ds.DeviceUnavailableError:
            pass
        else:
            raise AssertionError("host device 1 backs virtual gpu:0, it is not a CPU")
        print("D2L OK")
    """, DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    assert "D2L OK" in result.stdout


def test_with_virtual_gpus_jaxs_default_device_is_gpu_0_as_on_a_gpu_machine():
    result = run_python("""
        import jax, jax.numpy as jnp
        import devshim as ds

        def where(x):
            return str(ds.neutral_device(x))

        assert ds.num_gpus() == 2  # (devshim first: JAX starts its backends when asked its default)
        own = "cpu:0" if jax.default_backend() == "cpu" else "gpu:0"  # JAX's own default device: a real GPU if any
        assert jax.config.jax_default_device is ds.try_gpu() is jax.local_devices(backend="cpu")[1]
        assert where(jnp.ones(3)) == "gpu:0" and where(jax.random.PRNGKey(0)) == "gpu:0"
        with jax.default_device(ds.cpu()):  # a scope of JAX's own still wins
            assert where(jnp.ones(3)) == "cpu:0"
        ds.testing.virtual_devices(0)   # no virtual GPUs: JAX's own default again
        assert jax.config.jax_default_device is None and where(jnp.ones(3)) == own
        ds.testing.virtual_devices(2)
        assert ds.num_gpus() == 2 and where(jnp.ones(3)) == "gpu:0"  # set up again at devshim's next call
        print("DEFAULT OK")
    """, DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    assert "DEFAULT OK" in result.stdout


def test_a_default_device_the_user_chose_stays_and_without_virtual_gpus_none_is_set():
    chosen = run_python("""
        import jax, jax.numpy as jnp
        import devshim as ds

        try:
            jax.config.update("jax_default_device", "cpu")   # the user's choice, before devshim
            chosen = "cpu"
        except ValueError:   # JAX 0.4.31 takes a Device only, and finding one starts its backends
            chosen = None
        assert ds.num_gpus() == 2
        if chosen is None:   # there, the user's choice right after devshim set up its GPUs
            chosen = jax.devices("cpu")[0]
            jax.config.update("jax_default_device", chosen)
            ds.to_device(jnp.ones(1), ds.try_gpu())   # devshim's later calls leave it
        assert jax.config.jax_default_device == chosen and str(ds.neutral_device(jnp.ones(1))) == "cpu:0"
        print("CHOSEN OK")
    """, DEVSHIM_VIRTUAL_DEVICES="2")
    assert chosen.returncode == 0, chosen.stderr
    plain = run_python("""
        import jax, jax.numpy as jnp
        import devshim as ds

        real = [d for d in jax.devices() if d.platform != "cpu"]  # asked of JAX itself
        assert ds.num_gpus() == len(real) and jax.config.jax_default_device is None
        assert str(ds.neutral_device(jnp.ones(1))) == ("gpu:0" if real else "cpu:0")  # JAX's own default
        print("PLAIN OK")
    """, DEVSHIM_VIRTUAL_DEVICES="0")
    assert plain.returncode == 0, plain.stderr
    assert "CHOSEN OK" in chosen.stdout and "PLAIN OK" in plain.stdout


def test_virtual_devices_asked_for_after_jax_started_raise_backend_error():
    result = run_python("""
        import jax.numpy as jnp
        import devshim as ds

        jnp.ones(1)                      # JAX initialises its backends here, with one host device
        ds.testing.virtual_devices(2)
        try:
            ds.num_gpus()
        except ds.BackendError as err:
            print(err)
    """)
    assert result.returncode == 0, result.stderr
    assert "it is too late to add them" in result.stdout and "before starting Python" in result.stdout


def test_virtual_devices_the_variable_asked_for_after_jax_started_say_to_ask_devshim_first():
    """The variable was set in time (JAX never reads it): the remedy is devshim's first call, not
    setting the variable again."""
    result = run_python("""
        import jax.numpy as jnp
        import devshim as ds

        jnp.ones(1)                      # JAX initialises its backends before devshim is asked
        try:
            ds.num_gpus()
        except ds.BackendError as err:
            print(err)
    """, DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("DEVSHIM_VIRTUAL_DEVICES=2 asks for 2 virtual GPUs")
    assert "it is too late to add them" in result.stdout
    assert "call ds.num_gpus() (or ds.try_gpu()) right after importing JAX" in result.stdout
    assert "before starting Python" not in result.stdout


def test_host_devices_configured_before_are_enough_for_a_later_request():
    result = run_python("""
        import jax.numpy as jnp
        import devshim as ds

        jnp.ones(1)                      # started with four host devices (XLA_FLAGS)
        ds.testing.virtual_devices(2)
        print(ds.num_gpus(), ds.neutral_device(ds.to_device(jnp.ones(1), "gpu:1")).virtual)
    """, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "True"]


def test_older_jax_gets_its_host_devices_from_xla_flags(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    adapter = JaxBackend()
    adapter.__dict__["_fw"] = types.SimpleNamespace(config=types.SimpleNamespace())  # no jax_num_cpu_devices
    adapter._ask_for_host_devices(3)
    import os

    assert os.environ["XLA_FLAGS"] == (
        "--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=3")



def test_virtual_gpus_ask_xla_to_keep_library_operations_in_its_own_code():
    """Virtual GPUs ask XLA's CPU compiler for no oneDNN rewrite (every release) and no YNNPACK
    fusion (the releases whose XLA knows that flag: any other flag stops the process), keeping
    passes the user disabled and a YNNPACK setting of their own."""
    from devshim.backends.jax.core import _in_xla_own_code

    onednn = "onednn-convolution-rewriter,onednn-matmul-rewriter,onednn-ops-rewriter"
    assert _in_xla_own_code("", (0, 4, 31)) == f"--xla_disable_hlo_passes={onednn}"
    assert _in_xla_own_code("", (0, 8, 0)) == f"--xla_disable_hlo_passes={onednn}"
    for known in ((0, 8, 1), (0, 10, 2), (0, 12, 0)):
        assert _in_xla_own_code("", known).split() == [
            f"--xla_disable_hlo_passes={onednn}", "--xla_cpu_experimental_ynn_fusion_type="]
    for untested in ((0, 13, 0), (1, 0, 0), None):
        assert "ynn" not in _in_xla_own_code("", untested)
    mine = "--xla_dump_to=/tmp/d --xla_disable_hlo_passes=my-pass,onednn-ops-rewriter --xla_cpu_experimental_ynn_fusion_type=1"
    assert _in_xla_own_code(mine, (0, 10, 2)).split() == [
        "--xla_dump_to=/tmp/d", "--xla_cpu_experimental_ynn_fusion_type=1",
        "--xla_disable_hlo_passes=my-pass,onednn-ops-rewriter,onednn-convolution-rewriter,onednn-matmul-rewriter"]


def test_virtual_gpus_leave_the_users_xla_flags_to_child_processes():
    """XLA reads the flags when JAX starts; afterwards XLA_FLAGS is the user's again (unset where
    it was unset), and a convolution's gradient and a matrix product compiled on a virtual GPU
    are handed to no kernel library (as released, JAX 0.4.31 hands them to oneDNN, 0.9 and
    later to YNNPACK)."""
    result = run_python("""
        import os
        import jax, jax.numpy as jnp
        import devshim as ds

        ds.num_gpus()                    # JAX starts here, with the virtual GPU
        x = ds.to_device(jnp.ones((64, 1, 28, 28)), "gpu:0")
        w = ds.to_device(jnp.ones((16, 1, 3, 3)), "gpu:0")
        conv = lambda x, w: (jax.lax.conv(x, w, (1, 1), "VALID") @ jnp.ones((26, 26))).sum()
        text = jax.jit(jax.grad(conv, argnums=1)).lower(x, w).compile().as_text()
        print(os.environ.get("XLA_FLAGS"), "onednn" in text or "ynn" in text)
    """, XLA_FLAGS="--xla_cpu_enable_fast_math=false", DEVSHIM_VIRTUAL_DEVICES="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["--xla_cpu_enable_fast_math=false", "False"]

def test_devshim_info_lists_the_virtual_gpus():
    result = run_fresh("", "-m", "devshim", "info", "--json", DEVSHIM_BACKEND="jax", DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    entry = next(fw for fw in info["frameworks"] if fw["name"] == "jax")
    assert entry["status"] == "ok"
    assert entry["capabilities"]["virtual devices"] is True and entry["capabilities"]["ops"] is True
    assert [(d["device"], bool(d.get("virtual"))) for d in entry["devices"]] == [
        ("cpu:0", False), ("gpu:0", True), ("gpu:1", True),
    ]


def test_the_ops_module_leaves_jax_unstarted_so_virtual_devices_still_work():
    result = run_python("""
        import devshim as ds
        from devshim.bench.experiment import ops_for

        ops = ops_for("jax")             # imported before devshim has touched any device
        x = ops.rand((2, 3), ds.try_gpu(1))
        print(ds.neutral_device(x), ds.neutral_device(ops.matmul(x, x.T)))
    """, DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["gpu:1", "gpu:1"]


def test_more_virtual_gpus_than_jax_sets_up_quickly_is_refused_at_once_with_the_range():
    result = run_python(
        "import devshim as ds\n"
        "try:\n"
        "    ds.num_gpus()\n"
        "except ds.VirtualDeviceCountError as err:\n"
        "    print('refused:', err)\n",
        DEVSHIM_VIRTUAL_DEVICES="100000")
    assert "refused:" in result.stdout and "takes 0 to 4096" in result.stdout, result.stdout + result.stderr


# ------------------------------------------------------------ inside jax.jit


@pytest.mark.parametrize("where", ["cpu", "last gpu"])
def test_inside_jit_device_of_answers_none_and_to_device_places_as_device_put_does(where):
    # The last GPU is a virtual one in the second pass (DEVSHIM_VIRTUAL_DEVICES), the CPU otherwise.
    target = ds.cpu() if where == "cpu" else ds.try_gpu(max(ds.num_gpus() - 1, 0))
    seen = []

    def f(x):
        seen.append(ds.device_of(x))  # a tracer: placed only when the function runs
        y = jnp.zeros(2, device=ds.device_of(x)) + x  # None goes into device= as JAX's default
        return ds.to_device(y, target), jax.device_put(y, target)

    def g(x):
        return ds.to_device(x, target), ds.to_device({"y": x * 2}, target)["y"], ds.copy_if_needed(x, target)

    def h(x):
        return jax.device_put(x, target), jax.device_put({"y": x * 2}, target)["y"], jax.device_put(x, target)

    for x in (jax.device_put(jnp.ones(2), ds.cpu()), jnp.ones(2)):  # committed and uncommitted
        ours, theirs = jax.jit(f)(x)
        assert ds.device_of(ours) == ds.device_of(theirs)
        assert np.asarray(ours).tolist() == np.asarray(theirs).tolist() == [1.0, 1.0]
        ours, theirs = jax.jit(g)(x), jax.jit(h)(x)
        for a, b in zip(ours, theirs):
            assert ds.device_of(a) == ds.device_of(b)
            assert np.asarray(a).tolist() == np.asarray(b).tolist()
    assert seen and all(d is None for d in seen)
    # Outside, the array's own device: JAX's default, GPU 0 (virtual gpu:0 in the second pass)
    assert ds.device_of(x) == ds.try_gpu()


_MADE_WHERE_X_IS = {
    "jnp.zeros": lambda x: jnp.zeros(1, device=ds.device_of(x)),
    "jnp.zeros_like(jnp.ones)": lambda x: jnp.zeros_like(jnp.ones(1, device=ds.device_of(x))),
    "jnp.zeros_like(jnp.empty)": lambda x: jnp.zeros_like(jnp.empty(1, device=ds.device_of(x))),
    "jnp.full": lambda x: jnp.full(1, fill_value=0, device=ds.device_of(x)),
    "jnp.asarray": lambda x: jnp.asarray([0], device=ds.device_of(x)),
    "ds.to_device": lambda x: ds.to_device(jnp.zeros(1), ds.device_of(x)),
    "ds.copy_if_needed": lambda x: ds.copy_if_needed(jnp.zeros(1), ds.device_of(x)),
    "ds.to_device(nest)": lambda x: ds.to_device({"z": [jnp.zeros(1)]}, ds.device_of(x))["z"][0],
}


@pytest.mark.parametrize("how", list(_MADE_WHERE_X_IS))
def test_device_of_goes_back_into_jax_numpy_and_devshim_eagerly_and_inside_jit(how):
    make = _MADE_WHERE_X_IS[how]
    for x in (jnp.ones(1), jax.device_put(jnp.ones(1), ds.try_gpu(max(ds.num_gpus() - 1, 0)))):
        eager = make(x)
        assert np.asarray(eager).tolist() == [0] and ds.device_of(eager) == ds.device_of(x)
        traced = jax.jit(make)(x)  # device_of answers None in the trace; every call above takes it
        assert np.asarray(traced).tolist() == [0]


def test_none_is_a_target_only_inside_jit():
    x = jnp.ones(2)
    for move in (ds.to_device, ds.copy_if_needed):
        for value in (x, {"x": [x]}):
            with pytest.raises(ds.InvalidDeviceError, match="jax.jit"):
                move(value, None)
    with pytest.raises(ds.InvalidDeviceError, match="Accepted forms"):
        ds.device(None)  # and no spec for ds.device


# ------------------------------------------------------------ arrays spread over several devices
# In process where there are several devices (the virtual GPUs of the second pass); the plain pass
# runs the same tests in a fresh interpreter with four host devices (the last test below).


@pytest.fixture
def spread_over():
    """Two devices an array can be spread over: virtual (or real) GPUs, else host CPUs."""
    if ds.num_gpus() >= 2:
        return ds.try_all_gpus()[:2]
    cpus = jax.local_devices(backend="cpu")
    if len(cpus) >= 2:
        return cpus[:2]
    pytest.skip("this process has one JAX device; the fresh-interpreter test runs these with four")


def _mesh(devices):
    from jax.sharding import Mesh

    return Mesh(np.array(devices), ("b",))  # Auto axes: jnp.asarray(..., device=) takes them


def _shardings(devices):
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = _mesh(devices)
    return NamedSharding(mesh, PartitionSpec("b")), NamedSharding(mesh, PartitionSpec())


@pytest.mark.parametrize("layout", ["sharded", "replicated"])
def test_spread_device_of_is_the_sharding_and_goes_back_into_device(spread_over, layout):
    sharding = _shardings(spread_over)[layout == "replicated"]
    x = jax.device_put(jnp.arange(8.0), sharding)
    d = ds.device_of(x)
    assert d == x.sharding == x.device  # what array-api-compat's device(x) answers for JAX arrays
    assert ds.device_of(x) == d  # and again, from the table
    xp = ds.array_module(x)
    made = [jnp.zeros(8, device=d), jnp.asarray(np.ones(8), device=d), jnp.asarray(jnp.ones(8), device=d),
            jnp.ones_like(x, device=d), jax.device_put(np.ones(8), d), xp.full(8, 2.0, device=d)]
    for y in made:
        assert y.sharding == x.sharding and ds.device_of(y) == d
        assert ds.same_device(x, y)


def test_spread_neutral_device_refuses_and_names_device_of(spread_over):
    for sharding in _shardings(spread_over):
        x = jax.device_put(jnp.arange(8.0), sharding)
        with pytest.raises(ds.MultiDeviceValueError) as info:
            ds.neutral_device(x)
        assert isinstance(info.value, ds.UnsupportedValueError)
        message = str(info.value)
        assert "ds.device_of(x)" in message and "Sharding" in message
        for native in spread_over:
            assert str(ds.get_backend().describe(native)) in message


def _buffers(x) -> set:
    return {shard.data.unsafe_buffer_pointer() for shard in x.addressable_shards}


def test_spread_to_device_onto_a_sharding_is_device_put_in_new_storage(spread_over):
    sharded, replicated = _shardings(spread_over)
    x = jax.device_put(jnp.arange(8.0), sharded)
    y = ds.to_device(x, ds.device_of(x))
    assert y is not x and y.sharding == jax.device_put(x, sharded).sharding
    assert not _buffers(y) & _buffers(x)  # device_put would hand x's buffers back
    np.testing.assert_array_equal(np.asarray(y), np.arange(8.0))
    one = jax.device_put(jnp.ones(8), spread_over[0])  # a single-device array, spread
    for target in (sharded, replicated):
        z = ds.to_device(one, target)
        assert z.sharding == jax.device_put(one, target).sharding == target
    batch = ds.to_device({"x": one, "ys": [x, jnp.zeros(8)]}, replicated)
    assert all(leaf.sharding == replicated for leaf in (batch["x"], *batch["ys"]))
    gathered = ds.to_device(x, spread_over[1])  # onto one device: gathered there
    assert ds.device_of(gathered) == spread_over[1] == ds.neutral_device(gathered)
    np.testing.assert_array_equal(ds.to_numpy(x), np.arange(8.0))


def test_spread_copy_if_needed_keeps_arrays_placed_as_asked(spread_over):
    from jax.sharding import NamedSharding, PartitionSpec

    sharded, replicated = _shardings(spread_over)
    x = jax.device_put(jnp.arange(8.0), sharded)
    assert ds.copy_if_needed(x, ds.device_of(x)) is x
    assert ds.copy_if_needed(x, NamedSharding(_mesh(spread_over), PartitionSpec("b"))) is x  # an equal one
    z = ds.copy_if_needed(x, replicated)
    assert z is not x and z.sharding == replicated
    assert ds.copy_if_needed(z, replicated) is z
    one = jax.device_put(jnp.ones(8), spread_over[0])
    assert ds.copy_if_needed(one, spread_over[0]) is one
    w = ds.copy_if_needed(one, sharded)
    assert w is not one and w.sharding == sharded
    gathered = ds.copy_if_needed(z, spread_over[0])  # replicated is on more than that device
    assert gathered is not z and ds.neutral_device(gathered) == spread_over[0]
    nest = {"x": x, "w": [w]}
    assert ds.copy_if_needed(nest, sharded) is nest
    moved = ds.copy_if_needed({"x": x, "one": one}, sharded)
    assert moved["x"] is x and moved["one"].sharding == sharded


def test_spread_same_device_compares_shardings(spread_over):
    sharded, replicated = _shardings(spread_over)
    x = jax.device_put(jnp.arange(8.0), sharded)
    x2 = jax.device_put(jnp.ones(8), sharded)
    r = jax.device_put(jnp.ones(8), replicated)
    one = jax.device_put(jnp.ones(8), spread_over[0])
    assert ds.same_device(x, {"x2": [x2]}) and ds.same_device(r, r * 2)
    assert not ds.same_device(x, r) and not ds.same_device(x, one) and not ds.same_device(one, r)
    assert ds.ensure_same_device(x, {"x2": x2}) == x.sharding
    with pytest.raises(ds.DeviceMismatchError) as info:
        ds.ensure_same_device(x, {"r": r})
    message = str(info.value)
    assert "argument 1['r']" in message and "ds.copy_if_needed(<argument 1['r']>, ds.device_of(<argument 0>))" \
        in message
    with pytest.raises(ds.DeviceMismatchError, match=r"ds\.device\('"):
        ds.ensure_same_device(one, r)  # the first is one device: its spec names the fix


def test_spread_inside_jit_device_of_is_none_and_to_device_places_as_device_put(spread_over):
    sharded, replicated = _shardings(spread_over)
    x = jax.device_put(jnp.arange(8.0), sharded)
    seen = []

    def ours(a):
        seen.append(ds.device_of(a))
        return ds.to_device(a, replicated), ds.to_device(a * 2, ds.cpu())

    def theirs(a):
        return jax.device_put(a, replicated), jax.device_put(a * 2, ds.cpu())

    for got, want in zip(jax.jit(ours)(x), jax.jit(theirs)(x)):
        assert got.sharding == want.sharding
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert seen == [None]


def test_spread_a_sharding_is_a_target_for_jax_arrays_only(spread_over):
    sharded, _ = _shardings(spread_over)
    assert ds.device(sharded) is sharded  # the JAX backend takes it as it is
    for other in (np.ones(8), [np.ones(8)]):
        with pytest.raises(ds.InvalidDeviceError, match="NamedSharding"):
            ds.to_device(other, sharded)  # NumPy's backend has no such place


def test_arrays_over_several_devices_in_a_fresh_interpreter_with_four_host_devices():
    """The test_spread_ tests above, where this process has a single JAX device (the plain pass)."""
    if len(jax.devices()) >= 2 or ds.num_gpus() >= 2:
        pytest.skip("the test_spread_ tests ran in this process")
    import os

    result = run_fresh("", "-m", "pytest", os.path.abspath(__file__), "-q", "-p", "no:cacheprovider",
                       "-k", "test_spread_", DEVSHIM_BACKEND="jax",
                       XLA_FLAGS="--xla_force_host_platform_device_count=4")
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout and "skipped" not in result.stdout, result.stdout

"""torch's virtual GPUs behave as CUDA devices where a CUDA tensor's behaviour is more than its
values (issue 29): the lazy conjugate and negative bits, DLPack, random generators, quantized
tensors, saving and loading with storage sharing, replicas keeping tied weights, and torch's
own device-generic test framework.

Each test turns two virtual GPUs on (the ``vgpu`` fixture) or starts a fresh interpreter, so
the file runs alike with and without ``DEVSHIM_VIRTUAL_DEVICES``.
"""

from __future__ import annotations

import copy
import io
import pickle

import numpy as np
import pytest

import devshim as ds
from helpers import run_python
from machine import real_gpus

torch = pytest.importorskip("torch")
nn = torch.nn

SAME_DEVICE = "Expected all tensors to be on the same device, but found at least two devices"


@pytest.fixture
def vgpu(setenv):
    """Two virtual GPUs on the torch backend for this test (conftest restores settings after)."""
    setenv("DEVSHIM_DEVICE", None)
    ds.testing.virtual_devices(2)
    with ds.use_backend("torch") as adapter:
        assert ds.num_gpus() == 2
        yield adapter


def on_cpu_and_vgpu(make):
    """``make(device)`` on the CPU and on vgpu:1: the two results, the second on vgpu:1."""
    cpu, virtual = make("cpu"), make("vgpu:1")
    assert virtual.device == torch.device("vgpu", 1)
    return cpu, virtual


# ------------------------------------------------------------ flags torch keeps on the tensor


COMPLEX_VIEWS = {
    "conj": lambda x: x.conj(),
    "conj().imag": lambda x: x.conj().imag,
    "conj().real": lambda x: x.conj().real,
    "conj() of a view": lambda x: x[1:].conj(),
    "view of conj()": lambda x: x.conj()[1:].t() if x.dim() > 1 else x.conj()[1:],
    "conj().conj()": lambda x: x.conj().conj(),
    "neg view": lambda x: torch._neg_view(x),
    "conj().imag of a transposed view": lambda x: x.t().conj().imag if x.dim() > 1 else x.conj().imag,
    "conj().unbind()[0]": lambda x: x.conj().unbind()[0],
}


@pytest.mark.parametrize("name", list(COMPLEX_VIEWS))
def test_lazy_conjugate_and_negative_views_read_as_on_the_cpu(vgpu, name):
    view = COMPLEX_VIEWS[name]
    base = torch.tensor([[1 + 2j, 3 - 4j], [-5 + 6j, 7 + 8j]], dtype=torch.complex64)
    expected = view(base)
    got = view(base.to("vgpu:1"))
    assert (got.is_conj(), got.is_neg()) == (expected.is_conj(), expected.is_neg())
    assert got.device == torch.device("vgpu", 1) and torch.equal(got.cpu(), expected)
    assert torch.equal((got * 2 + 1).cpu(), expected * 2 + 1)  # the conjugate fallback, on both
    assert torch.equal(got.resolve_conj().resolve_neg().cpu(), expected.resolve_conj().resolve_neg())


def test_operations_on_conjugate_views_give_the_cpus_numbers(vgpu):
    x = torch.tensor([[1 + 2j, 3 - 4j], [-5 + 6j, 7 + 8j]], dtype=torch.complex128)
    cpu_c, v_c = x.conj(), x.to("vgpu:0").conj()
    for op in (lambda c: c @ c, lambda c: c.sum(), lambda c: torch.view_as_real(c.resolve_conj()),
               lambda c: c.imag.abs(), lambda c: c.clone(), lambda c: c.exp(), lambda c: c.t().contiguous()):
        assert torch.allclose(op(v_c).cpu(), op(cpu_c)), op
    # In place through the view writes the conjugate into the base, as on the CPU.
    base_cpu, base_v = x.clone(), x.to("vgpu:0")
    base_cpu.conj().add_(1)
    base_v.conj().add_(1)
    assert torch.equal(base_v.cpu(), base_cpu)
    # An in-place change of shape (follow_host) keeps the bit.
    shaped_cpu, shaped_v = x.conj(), x.to("vgpu:0").conj()
    shaped_cpu.t_()
    shaped_v.t_()
    assert shaped_v.is_conj() and torch.equal(shaped_v.cpu(), shaped_cpu)


# ------------------------------------------------------------ DLPack


@pytest.mark.parametrize("how", ["torch.from_dlpack(t)", "torch.from_dlpack(to_dlpack(t))"])
def test_dlpack_within_torch_shares_the_virtual_tensors_memory(vgpu, how):
    base = torch.arange(12.0).reshape(3, 4)
    t = base.to("vgpu:1")[1:]
    imported = torch.from_dlpack(t) if how == "torch.from_dlpack(t)" else \
        torch.from_dlpack(torch.utils.dlpack.to_dlpack(t))
    assert imported.device == torch.device("vgpu", 1) and imported.data_ptr() == t.data_ptr() != 0
    expected = base[1:]
    for op in (lambda x: x * 2 + 1, lambda x: x @ x.t(), lambda x: x[:, ::2].sum(0), lambda x: x.neg().exp(),
               lambda x: torch.cat([x, x]), lambda x: x.sort(descending=True)[0], lambda x: x.view(-1)):
        got = op(imported)
        assert got.device == torch.device("vgpu", 1) and torch.equal(got.cpu(), op(expected)), op
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        imported + torch.ones(2, 4, device="vgpu:0")
    assert imported.mul_(10) is imported
    imported[0, 0] = -1.0
    assert t.tolist() == [[-1.0, 50.0, 60.0, 70.0], [80.0, 90.0, 100.0, 110.0]]  # one memory
    assert torch.equal(imported.cpu(), t.cpu()) and torch.from_dlpack(t, device="cpu").device.type == "cpu"
    leaf = torch.from_dlpack(torch.ones(3, device="vgpu:0")).requires_grad_()
    (leaf * 2).sum().backward()
    assert leaf.grad.device == torch.device("vgpu", 0) and leaf.grad.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(BufferError, match="require gradient"):  # torch's own rule, as on CUDA
        torch.from_dlpack(torch.ones(2, device="vgpu:0", requires_grad=True))


@pytest.mark.parametrize("how", ["torch.asarray(t.__dlpack__())", "numpy.from_dlpack(t)", "t.__dlpack_device__()"])
def test_dlpack_for_anything_but_torch_is_refused_by_name(vgpu, how):
    t = torch.arange(4.0, device="vgpu:1")
    call = {"torch.asarray(t.__dlpack__())": lambda: torch.asarray(t.__dlpack__()),
            "numpy.from_dlpack(t)": lambda: np.from_dlpack(t),
            "t.__dlpack_device__()": lambda: t.__dlpack_device__()}[how]
    with pytest.raises(ds.VirtualDLPackError, match=r"ds\.convert\(t, 'numpy'\)") as info:
        call()
    assert isinstance(info.value, BufferError) and "vgpu:1" in str(info.value)
    assert ds.convert(t, "numpy").tolist() == [0.0, 1.0, 2.0, 3.0]  # what the message offers


def test_a_capsule_of_torchs_own_export_of_the_wrapper_is_refused_when_used(vgpu):
    t = torch.arange(4.0, device="vgpu:1")
    # torch's C function, not the torch.utils.dlpack.to_dlpack devshim installs: it reads the
    # wrapper's own storage, which has no memory.
    imported = torch.from_dlpack(torch._C._to_dlpack(t))
    with pytest.raises(ds.VirtualDLPackError, match=r"not made by devshim's virtual GPUs.*ds\.convert"):
        imported + 1
    with pytest.raises(ds.VirtualDLPackError, match="never through DLPack"):
        imported.cpu()


# ------------------------------------------------------------ random numbers


def test_each_virtual_gpu_has_its_own_seeded_generator(vgpu):
    torch.manual_seed(7)  # seeds the CPU's and every virtual GPU's generator
    first = [torch.randn(5, device=d).cpu() for d in ("vgpu:0", "vgpu:1")]
    cpu_first = torch.randn(5)
    torch.manual_seed(7)
    again = [torch.randn(5, device=d).cpu() for d in ("vgpu:0", "vgpu:1")]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    # Each device's stream starts where the CPU's does and moves on its own, as on CUDA.
    assert torch.equal(first[0], cpu_first) and torch.equal(first[1], cpu_first)
    torch.manual_seed(7)
    torch.randn(5, device="vgpu:1")
    assert torch.equal(torch.randn(5), cpu_first)  # drawing on vgpu:1 did not move the CPU's


def test_rng_state_of_a_virtual_gpu_gets_and_sets_as_on_cuda(vgpu):
    torch.vgpu.manual_seed_all(3)
    state = torch.vgpu.get_rng_state(1)
    assert state.dtype == torch.uint8 and state.device == torch.device("cpu")
    drawn = torch.rand(4, device="vgpu:1").cpu()
    torch.rand(4, device="vgpu:0")  # another device's stream does not matter
    torch.vgpu.set_rng_state(state, 1)
    assert torch.equal(torch.rand(4, device="vgpu:1").cpu(), drawn)
    states = torch.vgpu.get_rng_state_all()
    assert len(states) == 2 and len(torch.vgpu.default_generators) == 2
    assert torch.vgpu.default_generators[1].device == torch.device("vgpu", 1)
    torch.vgpu.manual_seed(11)
    assert torch.vgpu.initial_seed() == 11
    with torch.random.fork_rng(devices=[0, 1], device_type="vgpu"):
        torch.rand(4, device="vgpu:1")
    torch.vgpu.set_rng_state_all(states)
    assert torch.equal(torch.vgpu.get_rng_state(1), states[1])


def test_generators_of_a_virtual_gpu_as_torch_generator_makes_them(vgpu):
    g = torch.Generator(device="vgpu:1")
    assert g.device == torch.device("vgpu", 1) and isinstance(g, torch.Generator)
    assert isinstance(torch.default_generator, torch.Generator)
    assert torch.Generator().device == torch.device("cpu")
    g.manual_seed(5)
    a = torch.randn(6, generator=g, device="vgpu:1")
    g.manual_seed(5)
    b = torch.empty(6, device="vgpu:1").normal_(generator=g)
    assert torch.equal(a.cpu(), b.cpu())
    twin = g.clone_state()
    assert twin.device == g.device and torch.equal(torch.rand(3, generator=twin, device="vgpu:1").cpu(),
                                                   torch.rand(3, generator=g, device="vgpu:1").cpu())
    restored = pickle.loads(pickle.dumps(g))
    assert restored.device == g.device and torch.equal(restored.get_state(), g.get_state())
    # A CPU generator for a virtual GPU's draw is refused, as CUDA refuses it.
    with pytest.raises(RuntimeError, match="Expected a 'vgpu' device type for generator but found 'cpu'"):
        torch.randn(3, generator=torch.Generator(), device="vgpu:0")


def test_dropout_on_a_virtual_gpu_is_reproducible_and_uses_its_generator(vgpu):
    x = torch.ones(1000, device="vgpu:1")
    torch.manual_seed(0)
    first = nn.functional.dropout(x, 0.5).cpu()
    torch.manual_seed(0)
    cpu_state = torch.get_rng_state()
    second = nn.functional.dropout(x, 0.5).cpu()
    assert torch.equal(first, second) and 300 < int((first == 0).sum()) < 700
    assert torch.equal(torch.get_rng_state(), cpu_state)  # the CPU's generator did not move


# ------------------------------------------------------------ quantized tensors, own messages


@pytest.mark.parametrize("how", ["q.to(vgpu)", "quantize on vgpu", "factory", "ds.to_device"])
def test_quantized_tensors_on_a_virtual_gpu_are_refused_by_name(vgpu, how):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch.quantize_per_tensor(torch.arange(3.0), 0.1, 0, torch.quint8)
    call = {"q.to(vgpu)": lambda: q.to("vgpu:1"),
            "quantize on vgpu": lambda: torch.quantize_per_tensor(torch.ones(3, device="vgpu:1"), 0.1, 0, torch.qint8),
            "factory": lambda: torch._empty_affine_quantized((2,), scale=0.1, zero_point=0, dtype=torch.quint8,
                                                             device="vgpu:1"),
            "ds.to_device": lambda: ds.to_device(q, "vgpu:1")}[how]
    with pytest.raises(ds.UnsupportedValueError, match=r"hold no quantized tensors \(vgpu:1.*dequantize\(\)"):
        call()


def test_an_embedding_with_sparse_gradients_is_refused_by_name_in_its_forward(vgpu):
    """Its backward would make a sparse gradient, which a virtual GPU cannot hold; raised inside
    torch's autograd engine, that error ended the whole process. The dense embedding works."""
    weight = torch.randn(5, 3, device="vgpu:1", requires_grad=True)
    indices = torch.tensor([0, 2, 2], device="vgpu:1")
    for call in (lambda: nn.functional.embedding(indices, weight, sparse=True),
                 lambda: nn.Embedding(5, 3, sparse=True).to("vgpu:1")(indices)):
        with pytest.raises(ds.UnsupportedValueError, match="sparse=True makes a sparse gradient"):
            call()
    nn.functional.embedding(indices, weight).sum().backward()
    assert weight.grad.device == torch.device("vgpu", 1) and weight.grad.sum().item() == 9.0


def test_block_diag_keeps_its_own_device_message(vgpu):
    with pytest.raises(RuntimeError, match="torch.block_diag: input tensors must all be on the same device. "
                                           "Input 0 is on device cpu and input 1 is on device vgpu:1"):
        torch.block_diag(torch.ones(2, 2), torch.ones(2, 2, device="vgpu:1"))


# ------------------------------------------------------------ torch.save / torch.load


def saved_and_loaded(obj, **load):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load)


def test_save_and_load_keep_views_sharing_their_storage(vgpu):
    t = torch.arange(6.0, device="vgpu:1")
    back = saved_and_loaded({"t": t, "view": t[1:4], "strided": t[::2]})
    assert {v.device for v in back.values()} == {torch.device("vgpu", 1)}
    back["t"][2] = 100.0
    assert back["view"].tolist() == [1.0, 100.0, 3.0] and back["strided"].tolist() == [0.0, 100.0, 4.0]
    assert back["view"].untyped_storage().data_ptr() == back["t"].untyped_storage().data_ptr()


@pytest.mark.parametrize("map_location", ["cpu", torch.device("cpu"), "vgpu:0", {"vgpu:1": "vgpu:0"},
                                          "callable"])
def test_map_location_moves_a_virtual_checkpoint_as_a_cuda_one(vgpu, map_location):
    t = torch.arange(6.0, device="vgpu:1")
    if map_location == "callable":
        map_location, expected = (lambda storage, location: storage), torch.device("cpu")
    else:
        expected = torch.device("cpu") if "cpu" in str(map_location) else torch.device("vgpu", 0)
    back = saved_and_loaded({"t": t, "view": t[2:]}, map_location=map_location)
    assert back["t"].device == back["view"].device == expected
    back["t"][3] = -1.0
    assert back["view"].tolist() == [2.0, -1.0, 4.0, 5.0]


def test_a_checkpoint_for_a_virtual_gpu_this_process_lacks_is_refused(vgpu):
    buffer = io.BytesIO()
    torch.save(torch.ones(2, device="vgpu:1"), buffer)
    ds.testing.virtual_devices(1)
    ds.num_gpus()
    buffer.seek(0)
    with pytest.raises(ds.DeviceUnavailableError, match="vgpu:1 does not exist"):
        torch.load(buffer)
    buffer.seek(0)
    assert torch.load(buffer, map_location="vgpu:0").device == torch.device("vgpu", 0)


class TiedNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(5, 3)
        self.head = nn.Linear(3, 5, bias=False)
        self.head.weight = self.embed.weight


def test_tied_weights_stay_tied_through_a_checkpoint(vgpu):
    net = TiedNet().to("vgpu:1")
    state = saved_and_loaded(net.state_dict())
    assert state["embed.weight"].device == torch.device("vgpu", 1)
    assert state["embed.weight"].untyped_storage().data_ptr() == state["head.weight"].untyped_storage().data_ptr()
    whole = saved_and_loaded(net, weights_only=False)
    assert whole.head.weight is whole.embed.weight and whole.embed.weight.device == torch.device("vgpu", 1)
    fresh = TiedNet().to("vgpu:1")
    fresh.load_state_dict(state)
    assert torch.equal(fresh.head.weight.cpu(), net.embed.weight.detach().cpu())


def test_pickle_the_legacy_format_and_flagged_tensors_keep_device_and_sharing(vgpu):
    t = torch.arange(6.0, device="vgpu:1")
    back = pickle.loads(pickle.dumps({"t": t, "view": t[2:]}))  # plain pickle shares nothing, on the CPU neither
    assert back["view"].device == torch.device("vgpu", 1) and back["view"].tolist() == [2.0, 3.0, 4.0, 5.0]
    buffer = io.BytesIO()
    torch.save({"t": t, "view": t[2:]}, buffer, _use_new_zipfile_serialization=False)
    buffer.seek(0)
    legacy = torch.load(buffer)
    legacy["t"][3] = -2.0
    assert legacy["view"].device == torch.device("vgpu", 1) and legacy["view"].tolist() == [2.0, -2.0, 4.0, 5.0]
    z = torch.tensor([1 + 2j, 3 - 4j], device="vgpu:0")
    flagged = saved_and_loaded({"z": z, "conj": z.conj()})
    imag = saved_and_loaded(z.conj().imag)  # alone: torch saves no storage under two dtypes
    assert flagged["conj"].is_conj() and imag.is_neg() and imag.tolist() == [-2.0, 4.0]
    assert torch.equal(flagged["conj"].cpu(), z.cpu().conj())
    flagged["z"][0] = 9 + 9j
    assert flagged["conj"][0].item() == 9 - 9j
    dtypes = saved_and_loaded({"u16": torch.ones(2, dtype=torch.uint16, device="vgpu:0")})
    assert dtypes["u16"].device == torch.device("vgpu", 0) and dtypes["u16"].dtype == torch.uint16


def test_a_virtual_checkpoint_loads_onto_the_cpu_in_a_process_without_devshim(vgpu, tmp_path):
    path = tmp_path / "checkpoint.pt"
    t = torch.arange(4.0, device="vgpu:1")
    torch.save({"t": t, "view": t[1:], "state": TiedNet().to("vgpu:0").state_dict()}, path)
    result = run_python(f"""
        import torch
        back = torch.load({str(path)!r}, map_location="cpu")  # weights_only, torch's default
        back["t"][1] = 7.0
        state = back["state"]
        print(back["view"].device, back["view"].tolist(),
              state["embed.weight"].data_ptr() == state["head.weight"].data_ptr())
        try:
            torch.load({str(path)!r})
        except RuntimeError as err:
            print("refused:", "vgpu:1" in str(err))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["cpu [7.0, 2.0, 3.0] True", "refused: True"]


def test_deepcopy_keeps_views_sharing(vgpu):
    t = torch.arange(4.0, device="vgpu:1")
    twin = copy.deepcopy({"t": t, "view": t[1:]})
    twin["t"][1] = -1.0
    assert twin["view"].tolist() == [-1.0, 2.0, 3.0] and t.tolist() == [0.0, 1.0, 2.0, 3.0]


# ------------------------------------------------------------ ds.replicate keeps ties


@pytest.mark.parametrize("source", ["cpu", "vgpu:0"])
def test_replicate_keeps_tied_weights_on_every_target(vgpu, source):
    net = TiedNet().to(source)
    replicas = ds.replicate(net, ["cpu", "meta", "vgpu:0", "vgpu:1"])
    for replica, device in zip(replicas, ["cpu", "meta", "vgpu:0", "vgpu:1"], strict=True):
        assert replica.head.weight is replica.embed.weight, device
        assert replica.embed.weight.device == torch.device(device)
        assert replica.embed.weight is not net.embed.weight


# ------------------------------------------------------------ torch's device-generic tests


DEVICE_GENERIC_SUITE = '''
import torch
from torch.testing._internal.common_utils import TestCase
from torch.testing._internal.common_device_type import (
    deviceCountAtLeast, dtypes, instantiate_device_type_tests, onlyCPU, onlyNativeDeviceTypes)


class TestMine(TestCase):
    def test_add(self, device):
        self.assertEqual((torch.ones(3, device=device) + 1).sum().item(), 6)

    @onlyNativeDeviceTypes
    def test_native(self, device):
        self.assertEqual(torch.zeros(2, device=device).device.type, torch.device(device).type)

    @onlyCPU
    def test_cpu_only(self, device):
        pass

    @deviceCountAtLeast(2)
    def test_two_devices(self, devices):
        with self.assertRaisesRegex(RuntimeError, "same device"):
            torch.ones(2, device=devices[0]) + torch.ones(2, device=devices[1])

    @dtypes(torch.complex64)
    def test_conj(self, device, dtype):
        x = torch.randn(3, dtype=dtype, device=device)
        self.assertEqual(x.conj().imag, -x.imag)

    def test_is_the_cpu(self, device):
        self.assertEqual(torch.device(device).type, "cpu")


instantiate_device_type_tests(TestMine, globals())
'''


def test_torchs_device_generic_tests_run_on_virtual_gpus(tmp_path):
    pytest.importorskip("expecttest")  # torch's test framework needs it (tox installs it)
    (tmp_path / "conftest.py").write_text("import devshim as ds\nds.testing.torch_device_tests(2)\n")
    (tmp_path / "test_mine.py").write_text(DEVICE_GENERIC_SUITE)
    result = run_python(None, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(tmp_path / "test_mine.py"),
                        DEVSHIM_BACKEND="torch")
    outcomes = {}  # "Class::test" -> PASSED, FAILED or SKIPPED, from pytest's -rA summary
    for line in result.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED") and "::" in rest:
            outcomes["::".join(rest.split(" - ")[0].split("::")[-2:])] = word
    for name in ("test_add_cpu", "test_native_cpu", "test_conj_cpu_complex64", "test_is_the_cpu_cpu"):
        assert outcomes.get(f"TestMineCPU::{name}") == "PASSED", (name, result.stdout[-3000:])
    for name in ("test_add_vgpu", "test_native_vgpu", "test_conj_vgpu_complex64", "test_two_devices_vgpu"):
        assert outcomes.get(f"TestMinePRIVATEUSE1::{name}") == "PASSED", (name, result.stdout[-3000:])
    assert outcomes.get("TestMinePRIVATEUSE1::test_is_the_cpu_vgpu") == "FAILED"  # it runs there, truly
    # torch's own device types come too: CUDA's class where torch sees CUDA (asked of torch itself)
    cuda = real_gpus("torch") if (torch.version.cuda or torch.version.hip) else 0
    failed, passed, skipped = 1, 9, 2
    if cuda:
        for name in ("test_add_cuda", "test_native_cuda", "test_conj_cuda_complex64"):
            assert outcomes.get(f"TestMineCUDA::{name}") == "PASSED", (name, result.stdout[-3000:])
        assert outcomes.get("TestMineCUDA::test_is_the_cpu_cuda") == "FAILED"
        failed, passed, skipped = failed + 1, passed + 3 + (cuda >= 2), skipped + 1 + (cuda < 2)
    assert f"{failed} failed, {passed} passed, {skipped} skipped" in result.stdout, result.stdout[-2000:]


def test_torch_device_tests_after_torchs_framework_is_imported_says_so():
    pytest.importorskip("expecttest")
    result = run_python("""
        import devshim as ds
        import torch.testing._internal.common_device_type
        try:
            ds.testing.torch_device_tests(2)
        except ds.BackendError as err:
            print(err)
    """, DEVSHIM_BACKEND="torch")
    assert "before anything imports torch.testing._internal.common_device_type" in result.stdout, result.stderr
    assert "NATIVE_DEVICES" in result.stdout  # imported first: torch's native devices miss vgpu

"""The message of `ds.DeviceOutOfMemoryError` (devshim/backends/out_of_memory.py): which device
it names, the bytes asked for and free, what the framework said, and the advice; what the
mutation env (`tox -e mutation`, tools/mutation.py) found no test holding it to. Most tests give
`raise_if_out_of_memory` a stand-in framework (its adapter and memory contract, with figures set
here), so that every part of the message is known to the byte; one provokes the real error on
torch's virtual GPUs."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import devshim as ds
from devshim import settings
from devshim._device import Device
from devshim.backends.memory_base import DeviceMemory, MemoryInfo, format_bytes
from devshim.backends.out_of_memory import raise_if_out_of_memory

KiB, MiB = 2**10, 2**20

BATCH_ADVICE = ("use a smaller batch, put the work on another device (ds.try_all_gpus() lists them), or free "
                "memory there: drop the tensors you no longer need (del, then let them go out of scope)")
MODEL_ADVICE = ("use a smaller model (fewer or narrower layers, or a smaller dtype such as bfloat16), a device "
                "with more free memory (ds.try_all_gpus() lists them), or split the model over devices with a "
                "device map (ds.place_model(net, 'balanced'), or {'block1': 'gpu:0', 'block2': 'gpu:1'})")
HINT = "and standin.empty_cache() hands its pool's unused blocks back"
WORDED = ("(Worded as CUDA's out-of-memory error, which accelerate's and Lightning's batch-size finders "
          "look for.)")


@pytest.fixture(autouse=True)
def _no_size_left_behind():
    yield
    settings.set_virtual_memory(None)


class OutOfRoom(Exception):
    """The stand-in framework's out-of-memory error."""


class _Tensor:
    """A stand-in tensor: its framework counts its bytes; it has no `nbytes` of its own."""

    def __init__(self, size: int) -> None:
        self.size = size


class _Model:
    def __init__(self, size: int) -> None:
        self.size = size


class _Contract(DeviceMemory):
    """The stand-in's memory contract: each device's free bytes as given (a device missing from
    `free` cannot be read now); `free_hint` as given."""

    def __init__(self, free: dict, free_hint: str = HINT) -> None:
        self.free = free
        self.free_hint = free_hint

    def figures(self, adapter, native):
        if native not in self.free:
            raise OutOfRoom("cannot read the figures now")
        return MemoryInfo(adapter.describe(native), free=self.free[native], source="the stand-in")

    def accelerator_figures(self, adapter, native, device):
        raise AssertionError("figures answers")

    def is_out_of_memory(self, error):
        return isinstance(error, OutOfRoom)

    def nbytes(self, x):
        return x.size if isinstance(x, _Tensor) else None

    def model_bytes(self, model):
        return model.size if isinstance(model, _Model) else None


class _Framework:
    """The stand-in's adapter: "gpu:N" is its native device "sg:N" (the name its errors use)."""

    name = "standin"
    spec = SimpleNamespace(title="Stand-in")

    def __init__(self, contract: DeviceMemory, virtual: bool = False) -> None:
        self.peers = SimpleNamespace(memory=lambda name: contract if name == self.name else None)
        self.virtual = virtual

    def target(self, spec):
        kind, _, index = spec.partition(":")
        if kind != "gpu":
            raise ValueError(f"no such device: {spec}")
        return f"sg:{index}"

    def describe(self, native):
        return Device("gpu", int(native.split(":")[1]), virtual=self.virtual)


def named(error, call="to_device", value=None, devices=("gpu:0",), *, model=None, free=None,
          free_hint=HINT, virtual=False) -> ds.DeviceOutOfMemoryError:
    """The error `raise_if_out_of_memory` raises for the stand-in's `error` (free: native -> bytes)."""
    contract = _Contract({"sg:0": KiB} if free is None else free, free_hint)
    with pytest.raises(ds.DeviceOutOfMemoryError) as info:
        raise_if_out_of_memory(error, call, value, devices, model=model, adapters=[_Framework(contract, virtual)])
    assert info.value.__cause__ is error
    return info.value


def said(message: str) -> str:
    """What the message quotes of the framework's error."""
    return message.split(" Stand-in said: OutOfRoom: ")[1].split(" What to do: ")[0]


# ------------------------------------------------------------------ the whole message


def test_one_tensor_on_one_device_reads_in_full():
    error = named(OutOfRoom("sg:0 out of memory.\nmore lines"), value=_Tensor(4 * KiB))
    assert str(error) == (
        "ds.to_device: gpu:0 out of memory. It asked for 4.0 KiB; 1.0 KiB was free there before the call. "
        f"Stand-in said: OutOfRoom: sg:0 out of memory. What to do: {BATCH_ADVICE}, {HINT}. "
        f"ds.memory('gpu:0') shows what is in use. {WORDED}")
    assert (error.device, error.requested, error.free, error.call) == ("gpu:0", 4 * KiB, KiB, "ds.to_device")


def test_a_nest_counts_its_tensors_by_the_frameworks_count_else_their_own_nbytes():
    """The stand-in's tensor has no `nbytes` (its framework counts it); the NumPy array's is its own."""
    nest = {"a": _Tensor(3 * KiB), "b": [np.zeros(KiB, dtype=np.uint8), "not a tensor"]}
    error = named(OutOfRoom("sg:0 out of memory."), value=nest)
    assert "out of memory. It asked for 4.0 KiB (2 tensors); 1.0 KiB was free there before the call." in str(error)
    assert error.requested == 4 * KiB


def test_a_nest_of_one_tensor_is_not_counted_in_tensors():
    error = named(OutOfRoom("sg:0 out of memory."), value=[_Tensor(2 * KiB), "label"])
    assert "It asked for 2.0 KiB; 1.0 KiB was free" in str(error)


def test_no_value_asks_for_bytes_unknown_whatever_the_framework_counts_for_none():
    """No value given (or nothing in it counted): the message says the bytes asked for are unknown."""

    class CountsAnything(_Contract):
        def nbytes(self, x):
            return 0

    contract = CountsAnything({"sg:0": KiB})
    with pytest.raises(ds.DeviceOutOfMemoryError) as info:
        raise_if_out_of_memory(OutOfRoom("sg:0"), "to_device", None, ["gpu:0"], adapters=[_Framework(contract)])
    assert "out of memory. How many bytes it asked for is unknown; 1.0 KiB was free there" in str(info.value)
    assert info.value.requested is None


def test_unknown_figures_are_said_to_be_unknown():
    error = named(OutOfRoom("sg:0 out of memory."), value="no tensor", free={})  # figures cannot be read
    assert str(error).startswith(
        "ds.to_device: gpu:0 out of memory. How many bytes it asked for is unknown; the bytes free there are "
        "unknown. Stand-in said:")
    assert (error.device, error.requested, error.free) == ("gpu:0", None, None)


def test_without_a_device_it_can_name_the_message_says_a_device():
    error = named(OutOfRoom("out of memory."), value=_Tensor(KiB), devices=("tpu:0",))  # the stand-in has no tpu
    assert str(error) == (
        "ds.to_device: a device out of memory. It asked for 1.0 KiB; the bytes free there are unknown. "
        f"Stand-in said: OutOfRoom: out of memory. What to do: {BATCH_ADVICE}, {HINT}. "
        f"ds.memory('device') shows what is in use. {WORDED}")
    assert error.device is None
    assert str(named(OutOfRoom("out of memory."), devices=())).startswith("ds.to_device: a device out of memory. ")


# ------------------------------------------------------------------ which of several devices ran out


def test_of_several_devices_the_one_the_error_names_ran_out():
    error = named(OutOfRoom("sg:1 out of memory."), "split_batch", _Tensor(4 * KiB), ("gpu:0", "gpu:1"),
                  free={"sg:0": KiB, "sg:1": 2 * KiB})  # gpu:0 has less free than asked, but the error names sg:1
    assert str(error).startswith(
        "ds.split_batch: gpu:1 out of memory. It asked for 4.0 KiB; 2.0 KiB was free there before the call "
        "(free on each: gpu:0 1.0 KiB, gpu:1 2.0 KiB). Stand-in said: OutOfRoom: sg:1 out of memory. ")
    assert "ds.memory('gpu:1') shows what is in use." in str(error)
    assert (error.device, error.free) == ("gpu:1", 2 * KiB)


def test_of_several_devices_none_named_the_first_with_less_free_than_asked_ran_out():
    """gpu:0 has as much free as was asked for (enough): gpu:1, with less, ran out."""
    error = named(OutOfRoom("out of memory."), "split_batch", _Tensor(4 * KiB), ("gpu:0", "gpu:1"),
                  free={"sg:0": 4 * KiB, "sg:1": 3 * KiB})
    assert str(error).startswith(
        "ds.split_batch: gpu:1 out of memory. It asked for 4.0 KiB; 3.0 KiB was free there before the call "
        "(free on each: gpu:0 4.0 KiB, gpu:1 3.0 KiB). ")
    assert (error.device, error.free) == ("gpu:1", 3 * KiB)


def test_of_several_devices_none_known_to_have_run_out_the_message_names_them_all():
    error = named(OutOfRoom("out of memory."), "split_batch", _Tensor(4 * KiB), ("gpu:0", "gpu:1"),
                  free={"sg:1": 8 * KiB})  # gpu:0's figures cannot be read; gpu:1 has room
    assert str(error) == (
        "ds.split_batch: one of gpu:0, gpu:1 out of memory. It asked for 4.0 KiB; the bytes free there are "
        "unknown (free on each: gpu:0 unknown, gpu:1 8.0 KiB). Stand-in said: OutOfRoom: out of memory. "
        f"What to do: {BATCH_ADVICE}, {HINT}. ds.memory('device') shows what is in use. {WORDED}")
    assert (error.device, error.free) == (None, None)


# ------------------------------------------------------------------ what the framework said


def test_an_empty_error_message_is_quoted_as_empty():
    assert " Stand-in said: OutOfRoom:  What to do: " in str(named(OutOfRoom("")))


@pytest.mark.parametrize("length", [199, 200])
def test_the_frameworks_words_up_to_200_characters_are_quoted_whole(length):
    words = "a" * 100 + " " + "b" * (length - 101)
    assert said(str(named(OutOfRoom(words)))) == words


def test_longer_words_are_cut_at_the_last_space_before_200_characters():
    assert said(str(named(OutOfRoom("a" * 100 + " " + "b" * 100)))) == "a" * 100 + " ..."  # 201 characters
    words = "a" * 150 + " " + "b" * 30 + " " + "c" * 40
    assert said(str(named(OutOfRoom(words)))) == "a" * 150 + " " + "b" * 30 + " ..."


def test_a_space_just_past_200_characters_does_not_keep_the_word_before_it():
    words = "a" * 150 + " " + "b" * 49 + " " + "c" * 10  # the 201st character is a space
    assert said(str(named(OutOfRoom(words)))) == "a" * 150 + " ..."


def test_the_cut_is_at_a_space_not_at_other_whitespace():
    words = "a" * 150 + " " + "b" * 30 + "\t" + "c" * 40
    assert said(str(named(OutOfRoom(words)))) == "a" * 150 + " ..."


# ------------------------------------------------------------------ the advice


def test_a_model_that_does_not_fit_gets_a_models_advice():
    error = named(OutOfRoom("sg:0 out of memory."), "place_model", model=_Model(8 * MiB))
    assert str(error) == (
        "ds.place_model: gpu:0 out of memory. It asked for 8.0 MiB (the model's parameters and buffers); 1.0 KiB "
        f"was free there before the call. Stand-in said: OutOfRoom: sg:0 out of memory. What to do: {MODEL_ADVICE}, "
        f"{HINT}. ds.memory('gpu:0') shows what is in use. {WORDED}")
    assert error.requested == 8 * MiB


def test_replicas_that_do_not_fit_are_each_the_whole_model():
    error = named(OutOfRoom("sg:0 out of memory."), "replicate", model=_Model(8 * MiB))
    assert f" What to do: each replica is the whole model: {MODEL_ADVICE}, {HINT}. ds.memory(" in str(error)


def test_a_framework_without_a_hint_adds_nothing_to_the_advice():
    error = named(OutOfRoom("sg:0 out of memory."), free_hint="")
    assert f" What to do: {BATCH_ADVICE}. ds.memory('gpu:0') shows what is in use. " in str(error)


def test_a_virtual_gpu_suggests_a_larger_size_instead_of_the_frameworks_hint():
    settings.set_virtual_memory("64MiB")
    error = named(OutOfRoom("sg:0 out of memory."), virtual=True)
    assert (f" What to do: {BATCH_ADVICE}, or give the virtual GPUs more memory (DEVSHIM_VIRTUAL_MEMORY is "
            f"64.0 MiB). ds.memory('gpu:0') shows what is in use. ") in str(error)


def test_a_virtual_gpu_without_a_size_gets_no_hint():
    settings.set_virtual_memory(0)  # no size, whatever the environment says
    error = named(OutOfRoom("sg:0 out of memory."), virtual=True)
    assert f" What to do: {BATCH_ADVICE}. ds.memory('gpu:0') shows what is in use. " in str(error)


# ------------------------------------------------------------------ the real thing


def test_a_real_out_of_memory_on_a_virtual_gpu_reads_in_full(vgpu):
    torch = vgpu
    settings.set_virtual_memory(ds.memory("gpu:0").in_use + 8 * MiB)
    batch = torch.empty(10 * MiB, dtype=torch.uint8)
    with pytest.raises(ds.DeviceOutOfMemoryError) as info:
        ds.to_device(batch, "gpu:0")
    message = str(info.value)
    assert isinstance(info.value.__cause__, torch.OutOfMemoryError)
    assert message.startswith(
        "ds.to_device: gpu:0 out of memory. It asked for 10.0 MiB; 8.0 MiB was free there before the call. "
        "PyTorch said: OutOfMemoryError: vgpu:0 out of memory. ")
    assert message.endswith(
        f" What to do: {BATCH_ADVICE}, or give the virtual GPUs more memory (DEVSHIM_VIRTUAL_MEMORY is "
        f"{format_bytes(settings.virtual_memory())}). ds.memory('gpu:0') shows what is in use. {WORDED}")

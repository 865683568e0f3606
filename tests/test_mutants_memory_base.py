"""`devshim.backends.memory_base`: what it promises that the mutation env (`tox -e mutation`,
tools/mutation.py) found no test holding it to. `live_objects` scans the whole heap, and asks
whether a type is wanted once per type, not once per object (its verdicts): a kinds class whose
metaclass records each question shows it. The host's figures (the machine's memory, a cgroup's
limit, the process's resident memory and peak) are read from each of their sources in turn, each
given figures of its own here."""

from __future__ import annotations

import os
import types
from collections import Counter

import pytest

from devshim.backends import memory_base
from devshim.backends.memory_base import live_objects


class _Asked(type):
    """A metaclass that records the type each `issubclass(type, cls)` asks about."""

    asked: Counter = Counter()

    def __subclasscheck__(cls, kind) -> bool:
        _Asked.asked[kind] += 1
        return super().__subclasscheck__(kind)


class _Wanted(metaclass=_Asked):
    pass


class _Plenty:
    pass


def test_live_objects_asks_once_per_type_however_many_objects_have_it():
    wanted = [_Wanted(), _Wanted()]
    plenty = [_Plenty() for _ in range(5)]
    _Asked.asked.clear()
    found = live_objects((_Wanted,))
    asked = dict(_Asked.asked)
    assert sorted(map(id, found)) == sorted(map(id, wanted))
    assert asked[_Plenty] == 1 and asked[_Wanted] == 1  # five and two objects, one question each
    assert max(asked.values()) == 1
    del plenty


# ------------------------------------------------------------------ the host's figures
# What `ds.memory("cpu")` reports comes from /proc where Linux has it, psutil elsewhere, then
# sysconf, and a cgroup's limit where it is lower. On a Linux machine every path agrees, so these
# tests give each source its own figures (files read through `_read`, a psutil of their own).


class _FakePsutil:
    """psutil's few calls devshim makes, with figures of its own."""

    def __init__(self, total=7000, available=3000, rss=990):
        self.memory = types.SimpleNamespace(total=total, available=available)
        self.rss = rss

    def virtual_memory(self):
        return self.memory

    def Process(self):  # noqa: N802 - psutil's name
        return types.SimpleNamespace(memory_info=lambda: types.SimpleNamespace(rss=self.rss))


def _host(monkeypatch, files: dict, psutil=None):
    """Make the host's files `files` (path -> text; any other path unreadable) and its psutil."""
    monkeypatch.setattr(memory_base, "_read", files.get)
    monkeypatch.setattr(memory_base, "_psutil", lambda: psutil)


MEMINFO = """MemTotal:       16000 kB
MemFree:         4000 kB
MemAvailable:    9000 kB
Odd:line:          12 kB
Bare:
Words:           many kB
HugePages_Total:    3
"""


def test_the_machines_memory_is_read_from_meminfo_available_before_free(monkeypatch):
    _host(monkeypatch, {"/proc/meminfo": MEMINFO}, psutil=_FakePsutil())
    assert memory_base._machine_memory() == (16000 * 1024, 9000 * 1024)
    without_available = MEMINFO.replace("MemAvailable:    9000 kB\n", "")
    _host(monkeypatch, {"/proc/meminfo": without_available}, psutil=_FakePsutil())
    assert memory_base._machine_memory() == (16000 * 1024, 4000 * 1024)
    _host(monkeypatch, {"/proc/meminfo": "Other:  5 kB\n"}, psutil=_FakePsutil())
    assert memory_base._machine_memory() == (None, None)  # meminfo says nothing of either


def test_the_machines_memory_comes_from_psutil_then_sysconf_without_meminfo(monkeypatch):
    _host(monkeypatch, {}, psutil=_FakePsutil(total=7000, available=3000))
    assert memory_base._machine_memory() == (7000, 3000)
    pages = {"SC_PHYS_PAGES": 50, "SC_AVPHYS_PAGES": 20}
    _host(monkeypatch, {}, psutil=None)
    monkeypatch.setattr(memory_base.os, "sysconf", pages.__getitem__, raising=False)
    assert memory_base._machine_memory() == (50 * memory_base._PAGE, 20 * memory_base._PAGE)

    def refuses(name):
        raise ValueError(name)

    monkeypatch.setattr(memory_base.os, "sysconf", refuses)
    assert memory_base._machine_memory() == (None, None)
    monkeypatch.delattr(memory_base.os, "sysconf")
    assert memory_base._machine_memory() == (None, None)


def test_a_cgroups_limit_below_the_machine_is_the_total_and_bounds_what_is_free(monkeypatch):
    def cgroup(limit, usage, meminfo=MEMINFO):
        files = {"/proc/meminfo": meminfo, "/sys/fs/cgroup/memory.max": limit}
        if usage is not None:
            files["/sys/fs/cgroup/memory.current"] = usage
        _host(monkeypatch, files)
        return memory_base._machine_memory()

    kib = 1024
    assert cgroup(f"{8000 * kib}\n", f"{6000 * kib}\n") == (8000 * kib, 2000 * kib)   # less than available
    little = MEMINFO.replace("9000 kB", "3000 kB")
    assert cgroup(f"{8000 * kib}\n", f"{100 * kib}\n", little) == (8000 * kib, 3000 * kib)  # available is less
    assert cgroup(f"{8000 * kib}\n", f"{9000 * kib}\n") == (8000 * kib, 0)            # over its limit
    assert cgroup(f"{8000 * kib}\n", None) == (8000 * kib, 9000 * kib)                # usage unknown
    assert cgroup(f"{16000 * kib}\n", f"{15000 * kib}\n") == (16000 * kib, 9000 * kib)  # not below: as is
    assert cgroup(f"{20000 * kib}\n", f"{19000 * kib}\n") == (16000 * kib, 9000 * kib)
    monkeypatch.delattr(memory_base.os, "sysconf")  # the cgroup alone is known
    assert cgroup(f"{8000 * kib}\n", f"{6000 * kib}\n", meminfo="") == (8000 * kib, 2000 * kib)
    assert cgroup(f"{8000 * kib}\n", f"{9000 * kib}\n", meminfo="") == (8000 * kib, 0)
    assert cgroup(f"{8000 * kib}\n", None, meminfo="") == (8000 * kib, None)


def test_the_cgroup_limit_is_read_from_version_2_then_version_1(monkeypatch):
    v2, v2_usage = "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"
    v1, v1_usage = "/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"
    cases = [
        ({v2: " 4096\n", v2_usage: "1024\n", v1: "9\n", v1_usage: "8\n"}, (4096, 1024)),
        ({v2: "max\n", v2_usage: "1024\n", v1: "8192\n", v1_usage: "2048\n"}, (8192, 2048)),
        ({v1: "8192\n", v1_usage: "2048\n"}, (8192, 2048)),
        ({v2: "4096\n", v2_usage: "n/a\n"}, (4096, None)),
        ({v2: "4096\n"}, (4096, None)),
        ({v2: "max\n"}, (None, None)),
        ({}, (None, None)),
    ]
    for files, expected in cases:
        _host(monkeypatch, files)
        assert memory_base._cgroup_limit() == expected, files


def test_the_process_resident_memory_is_statms_second_field_then_psutils(monkeypatch):
    _host(monkeypatch, {"/proc/self/statm": "500 25 7 1 0 30 0\n"}, psutil=_FakePsutil(rss=990))
    assert memory_base._process_resident() == 25 * memory_base._PAGE
    _host(monkeypatch, {}, psutil=_FakePsutil(rss=990))
    assert memory_base._process_resident() == 990
    _host(monkeypatch, {}, psutil=None)
    assert memory_base._process_resident() is None


def test_the_process_peak_is_vmhwm_then_the_rusage_maximum(monkeypatch):
    status = "Name:\tpython\nVmPeak:\t  9000 kB\nVmHWM:\t   1234 kB\nVmRSS:\t 1000 kB\n"
    _host(monkeypatch, {"/proc/self/status": status})
    assert memory_base._process_peak() == 1234 * 1024
    import resource

    asked = []

    def getrusage(who):
        asked.append(who)
        return types.SimpleNamespace(ru_maxrss=77)

    monkeypatch.setattr(resource, "getrusage", getrusage)
    for files in ({}, {"/proc/self/status": "Name:\tpython\n"}):
        _host(monkeypatch, files)
        monkeypatch.setattr(memory_base.sys, "platform", "linux")
        assert memory_base._process_peak() == 77 * 1024        # Linux counts KiB
        monkeypatch.setattr(memory_base.sys, "platform", "darwin")
        assert memory_base._process_peak() == 77               # macOS counts bytes
    assert set(asked) == {resource.RUSAGE_SELF}


def test_a_file_that_is_not_ascii_is_no_figure(tmp_path):
    """The kernel's files are ASCII: anything else read there is not a figure devshim trusts."""
    path = tmp_path / "meminfo"
    path.write_bytes("MemTotal: 16 kB\nNote: \u00e9t\u00e9\n".encode("utf-8"))
    assert memory_base._read(str(path)) is None
    path.write_text("MemTotal: 16 kB\n", encoding="ascii")
    assert memory_base._read(str(path)) == "MemTotal: 16 kB\n"
    assert memory_base._read(str(tmp_path / "absent")) is None


def test_resetting_the_process_peak_brings_vmhwm_down_to_what_is_resident():
    """On Linux, after a large block is freed, the peak stays up until `reset_process_peak`, which
    says it could and starts it over at the resident size."""
    if not os.access("/proc/self/clear_refs", os.W_OK):
        pytest.skip("the process's peak is reset through /proc/self/clear_refs (Linux)")
    block = bytearray(256 * 2**20)  # 256 MiB, touched
    for offset in range(0, len(block), 4096):
        block[offset] = 1
    del block
    before = memory_base._process_peak()
    assert memory_base.reset_process_peak() is True
    after, resident = memory_base._process_peak(), memory_base._process_resident()
    assert after < before - 200 * 2**20, (before, after)
    assert after <= resident + 16 * 2**20, (after, resident)


def test_resetting_the_process_peak_says_whether_it_could(monkeypatch):
    def refused(*args, **kwargs):
        raise PermissionError("clear_refs")

    monkeypatch.setattr(memory_base, "open", refused, raising=False)
    assert memory_base.reset_process_peak() is False


def test_byte_counts_for_people_use_binary_units_up_to_tebibytes():
    assert memory_base.format_bytes(None) == "unknown"
    assert memory_base.format_bytes(1023) == "1023 B"
    assert memory_base.format_bytes(1024) == "1.0 KiB"
    assert memory_base.format_bytes(-3 * 2**20) == "-3.0 MiB"
    assert memory_base.format_bytes(5 * 2**40) == "5.0 TiB"
    assert memory_base.format_bytes(3 * 2**50) == "3072.0 TiB"  # no larger unit

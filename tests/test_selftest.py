"""`devshim selftest`: the checks on this machine's devices, the report, the verdict and the exit
status; a failing, crashing or hanging check is reported and the others still run."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

import devshim as ds
from devshim import cli, selftest, settings
from devshim.selftest import checks, report, runner
from helpers import run_python
from machine import real_gpus

VIRTUAL = os.environ.get(settings.VIRTUAL_DEVICES_VAR, "").strip()
DOCS = Path(__file__).resolve().parent.parent / "docs"


def installed_here() -> list:
    from devshim.backends import specs

    return [name for name, spec in specs().items() if spec.is_installed()]


@pytest.fixture(scope="module")
def full_run():
    """`devshim selftest` as a user runs it, with this tox pass's virtual devices (if any)."""
    env = {settings.VIRTUAL_DEVICES_VAR: VIRTUAL} if VIRTUAL else {}
    return run_python("", "-m", "devshim", "selftest", timeout=600, **env)


def test_selftest_passes_on_every_installed_backend_and_says_so(full_run):
    assert full_run.returncode == 0, full_run.stdout + full_run.stderr
    out = full_run.stdout
    for name in installed_here():
        assert f"\n{name} (" in out, f"no section for {name}"
    assert "FAIL" not in out
    verdict = out.strip().splitlines()[-1]
    assert verdict.startswith("verdict: PASSED: ") and "none failed" in verdict
    assert "matmul (float32, n x n): GFLOP/s on the CPU and each GPU:" in out
    # Column widths follow the values measured (" GB/s " or "  GB/s "): match the cells, not the padding.
    # Without a device (no GPU, no virtual ones) a host-to-host copy is no transfer: a line says so instead.
    # (asked of each framework: under the numpy backend ds.num_gpus() is 0 on a GPU machine too)
    transfers = bool(VIRTUAL) or any(real_gpus(name) for name in installed_here())
    for cell in ("GFLOP/s",) + (("host->device", "GB/s") if transfers else ()):
        assert re.search(rf"\|\s*{re.escape(cell)}\s*\|", out), f"no {cell} column or cell in the report"
    if not transfers:
        assert ": no device but the host (no GPU, real or virtual, or the CPU was asked for)" in out
        assert "measured  host -> device: not measured, no device here for" in out and "host->device |" not in out
    assert "selftest: checking" in full_run.stderr  # progress goes to stderr


def test_the_report_carries_versions_devices_and_each_check(full_run):
    out = full_run.stdout
    assert out.startswith(f"devshim selftest: devshim {ds.__version__}, Python ")
    assert "environment: DEVSHIM_BACKEND=(unset)" in out
    assert "  device cpu:0: " in out
    assert "  PASS  conformance  exact copies on cpu:0" in out
    if VIRTUAL:
        guarded = [n for n in installed_here() if ds.backends.specs()[n].virtual_devices
                   and ds.backends.specs()[n].has_module("guard")]
        if guarded:  # the guard checks really ran, on the virtual GPUs
            assert "PASS  guard        implicit host reads refused on gpu:0 (virtual), gpu:1 (virtual)" in out
    elif not any(real_gpus(name) for name in installed_here()):  # asked of each framework itself
        assert "sees no GPU here" in out  # the GPU checks say why they were skipped
    else:  # a GPU machine: the GPU checks ran on the real GPU of a framework that sees one
        with_gpu = next(name for name in installed_here() if real_gpus(name))
        section = out.split(f"\n{with_gpu} (", 1)[1].split("\n\n", 1)[0]
        assert ("PASS  guard        implicit host reads refused on gpu:0" in section
                or not ds.backends.specs()[with_gpu].has_module("guard"))  # a backend without a transfer guard
        assert "PASS  conformance  exact copies on cpu:0, gpu:0" in section


def test_json_report_is_machine_readable_and_consistent(capsys):
    status = cli.main(["selftest", "--json", "--checks-only", "--backend", "numpy"])
    document = json.loads(capsys.readouterr().out)
    assert status == 0 == selftest.main_status(document)
    (section,) = document["backends"]
    assert section["name"] == "numpy" and section["version"] and section["complete"] is True
    assert section["devices"][0]["device"] == "cpu:0"
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for result in section["results"]:
        counts[result["status"]] += 1
        assert set(result) >= {"group", "check", "where", "status", "detail", "summary", "seconds"}
        if result["status"] == "skipped":
            assert result["detail"], "a skip must say why"
    assert {k: document["summary"][k] for k in counts} == counts
    assert document["verdict"].startswith("PASSED")
    assert document["not_checked"]["cupy"].startswith("not installed") or "cupy" in installed_here()
    assert set(document["environment"]) == set(selftest.ENV_VARS)


@pytest.fixture
def plain(setenv):
    """In this process, as without virtual devices (NumPy, checked in-process here, has none)."""
    setenv(settings.VIRTUAL_DEVICES_VAR, None)


def test_every_declared_check_reports_once_per_place_it_runs(plain):
    events = []
    runner.run_backend("numpy", events.append, measure=False)
    results = [e for e in events if e["event"] == "result"]
    names = {r["check"] for r in results}
    assert {c.name for c in checks.CHECKS} <= names
    assert events[-1]["event"] == "done"
    assert all(r["status"] != "failed" for r in results), [r for r in results if r["status"] == "failed"]


def test_a_failing_check_fails_alone_and_the_others_still_run(monkeypatch, plain):
    def always_copies(x, device):  # a broken copy_if_needed
        return ds.to_device(x, device)

    monkeypatch.setattr(ds, "copy_if_needed", always_copies)
    events = []
    runner.run_backend("numpy", events.append, measure=False)
    results = {r["check"]: r for r in events if r["event"] == "result"}
    broken = results["to_device and copy_if_needed"]
    assert broken["status"] == "failed"
    assert "copy_if_needed(x, 'cpu') copied a tensor already there" in broken["detail"]
    assert "checks.py:" in broken["detail"]  # where it failed
    assert results["exact copies"]["status"] == "passed" and results["devices"]["status"] == "passed"


def test_an_unexpected_exception_is_that_checks_failure(monkeypatch, plain):
    def explodes(ctx):
        raise KeyError("boom")

    monkeypatch.setattr(checks, "CHECKS", [checks.Check("explodes", "conformance", "raises", "backend", explodes),
                                           *checks.CHECKS])
    events = []
    runner.run_backend("numpy", events.append, measure=False)
    results = [e for e in events if e["event"] == "result"]
    assert results[1]["check"] == "explodes" and results[1]["status"] == "failed"
    assert results[1]["detail"].startswith("KeyError: 'boom'")
    assert results[2]["check"] == "devices" and results[2]["status"] == "passed"


def _fake_process(events, returncode=0, stderr="", timeout=False):
    """A stand-in for subprocess.run that writes ``events`` where the runner would."""

    def fake(command, **kwargs):
        path = next(arg for arg in command if arg.endswith(".jsonl"))
        with open(path, "a", encoding="utf-8") as handle:
            for event in events:
                handle.write(json.dumps(event) + "\n")
        if timeout:
            raise subprocess.TimeoutExpired(command, kwargs["timeout"])
        return subprocess.CompletedProcess(command, returncode, "", stderr)

    return fake


STARTED = [
    {"event": "backend", "backend": "numpy", "title": "NumPy", "version": "2", "devices": []},
    {"event": "result", "backend": "numpy", "group": "conformance", "check": "devices", "where": "",
     "status": "passed", "detail": "", "seconds": 0.1, "summary": ""},
    {"event": "start", "backend": "numpy", "group": "conformance", "check": "exact copies", "where": "cpu:0"},
]


def test_a_crash_is_the_failure_of_the_check_that_was_running(monkeypatch):
    monkeypatch.setattr(selftest.subprocess, "run", _fake_process(STARTED, -11, "Fatal Python error: Segmentation fault"))
    document = selftest.run(["numpy"])
    results = document["backends"][0]["results"]
    assert [r["status"] for r in results] == ["passed", "failed"]
    assert results[1]["check"] == "exact copies" and results[1]["where"] == "cpu:0"
    assert "exit status -11" in results[1]["detail"] and "Segmentation fault" in results[1]["detail"]
    assert document["verdict"].startswith("FAILED: 1 of 2 checks failed (numpy exact copies on cpu:0)")
    assert selftest.main_status(document) == 1


def test_a_hang_is_stopped_and_reported(monkeypatch):
    monkeypatch.setattr(selftest.subprocess, "run", _fake_process(STARTED, timeout=True))
    document = selftest.run(["numpy"], timeout=7)
    failed = document["backends"][0]["results"][-1]
    assert failed["status"] == "failed" and "stopped after 7 s (--timeout)" in failed["detail"]
    assert "while running exact copies on cpu:0" in failed["detail"]


def test_the_text_report_merges_devices_and_ends_with_the_verdict():
    def result(check, where, status="passed", detail="", group="conformance"):
        return {"group": group, "check": check, "where": where, "status": status, "detail": detail,
                "seconds": 0.0, "summary": ""}

    section = {"name": "torch", "title": "PyTorch", "version": "2.13.0", "notes": [], "measurements": {},
               "devices": [{"device": "gpu:0", "name": "NVIDIA H100", "memory_bytes": 80 * 2**30}],
               "results": [result("nests", "cpu:0"), result("nests", "gpu:0"),
                           result("nests", "gpu:1", "failed", "the bits changed"),
                           result("a", "", "skipped", "no guard", "guard"),
                           result("b", "", "skipped", "no guard", "guard")]}
    document = {"devshim": "0.1.0", "python": "3.11", "platform": "Linux", "cpu_count": 8,
                "environment": dict.fromkeys(selftest.ENV_VARS), "backends": [section], "not_checked": {},
                "summary": {"passed": 2, "failed": 1, "skipped": 2, "seconds": 1.0}}
    document["verdict"] = selftest._verdict(document)
    text = report.format_report(document)
    assert "  device gpu:0: NVIDIA H100, 80.0 GiB" in text
    assert "  PASS  conformance  nests on cpu:0, gpu:0\n" in text
    assert "  FAIL  conformance  nests on gpu:1: the bits changed" in text
    assert "  skip  guard        all 2 checks: no guard" in text
    assert text.splitlines()[-1] == (
        "verdict: FAILED: 1 of 5 checks failed (torch nests on gpu:1). devshim does not work as "
        "documented here: please paste this whole report into a bug report.")


def test_an_unknown_backend_is_a_usage_error(capsys):
    assert cli.main(["selftest", "--backend", "caffe"]) == 2
    assert "Unknown backend 'caffe'" in capsys.readouterr().err


def test_the_checks_need_neither_pytest_nor_the_tests():
    result = run_python("""
        import sys
        import devshim.selftest.checks, devshim.selftest.runner, devshim.selftest.report
        assert "pytest" not in sys.modules and "harnesses" not in sys.modules, sorted(sys.modules)
        print("ok")
    """)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_the_docs_describe_every_check():
    page = (DOCS / "selftest.md").read_text(encoding="utf-8")
    for declared in checks.CHECKS:
        assert f"| {declared.name} |" in page, f"docs/selftest.md does not list the check {declared.name!r}"

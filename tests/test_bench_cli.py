"""`devshim bench`: table on stdout, progress on stderr, JSON and PNG files, clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import devshim as ds
from devshim import bench, cli

TINY = {
    "matmul": ["--sizes", "4", "8"],
    "logging": ["--sizes", "4", "--steps", "3"],
    "parallel": ["--sizes", "8", "--steps", "2"],
    "transfer": ["--sizes", "0.01", "0.02"],
    "overhead": [],
}
FAST = ["--min-run-time", "0.002"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVSHIM_")}
    env.update(extra)
    return env


@pytest.mark.parametrize("experiment", sorted(TINY))
def test_each_experiment_prints_a_table_and_writes_json_and_png(experiment, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    data, picture = tmp_path / "rows.json", tmp_path / "plot.png"
    argv = ["bench", experiment, "--backend", "all", *TINY[experiment], *FAST,
            "--json", str(data), "--plot", str(picture)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    backends, _ = bench.all_backends()
    document = json.loads(data.read_text())
    assert document["experiment"] == experiment
    assert {row["backend"] for row in document["rows"]} == set(backends)
    assert set(document["setup"]["backends"]) == set(backends)
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert len(table) == 2 + len(document["rows"])  # heading, rule, one line per row
    assert picture.read_bytes().startswith(PNG_MAGIC)
    assert f"wrote {data}" in out and f"wrote {picture}" in out


def test_progress_bar_goes_to_stderr(capsys):
    pytest.importorskip("tqdm")
    assert cli.main(["bench", "matmul", *TINY["matmul"], *FAST]) == 0
    captured = capsys.readouterr()
    assert "matmul on" in captured.err and "100%" in captured.err
    assert "100%" not in captured.out


def test_progress_without_tqdm_is_plain_lines(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    assert cli.main(["bench", "matmul", *TINY["matmul"], *FAST]) == 0
    err = capsys.readouterr().err
    steps = 2 * len(ds.devices())
    assert f"[0/{steps}]" in err and f"[{steps}/{steps}] done" in err


def test_no_progress_keeps_stderr_quiet(capsys):
    assert cli.main(["bench", "matmul", *TINY["matmul"], *FAST, "--no-progress"]) == 0
    assert capsys.readouterr().err == ""


def test_plot_without_matplotlib_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    data = tmp_path / "rows.json"
    code = cli.main(["bench", "matmul", *TINY["matmul"], *FAST, "--json", str(data),
                     "--plot", str(tmp_path / "p.png")])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.strip().splitlines() == [
        'devshim: error: --plot needs matplotlib, which is not installed. Install it with '
        'pip install "devshim[plot]", or leave out --plot.'
    ]
    assert captured.out == "" and not data.exists()  # it failed before measuring anything


def test_plot_without_matplotlib_in_a_real_process_has_no_traceback(tmp_path):
    code = (
        "import sys\n"
        "sys.modules['matplotlib'] = None\n"
        "from devshim.cli import main\n"
        f"sys.exit(main(['bench', 'matmul', '--sizes', '4', '--plot', {str(tmp_path / 'p.png')!r}]))\n"
    )
    env = clean_env(DEVSHIM_BACKEND="numpy")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and 'pip install "devshim[plot]"' in result.stderr


def test_python_dash_m_devshim_bench_runs(tmp_path):
    env = clean_env(DEVSHIM_BACKEND="numpy")
    result = subprocess.run(
        [sys.executable, "-m", "devshim", "bench", "logging", "--sizes", "4", "--steps", "2", *FAST,
         "--no-progress", "--json", str(tmp_path / "l.json")],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "log to host each step" in result.stdout
    rows = json.loads((tmp_path / "l.json").read_text())["rows"]
    assert [r["host_reads"] for r in rows] == [2, 1]


@pytest.mark.parametrize("argv, match", [
    (["bench", "overhead", "--sizes", "3"], "takes no --sizes"),
    (["bench", "matmul", "--sizes", "1.5"], "whole matrix sizes"),
    (["bench", "logging", "--sizes", "4", "8"], "one matrix size"),
    (["bench", "transfer", "--steps", "3"], "--steps applies to logging and parallel"),
    (["bench", "transfer", "--device", "cpu", "--device", "cpu"], "give --device once"),
    (["bench", "matmul", "--backend", "caffe"], "Unknown backend 'caffe'"),
])
def test_bad_options_are_explained(argv, match, capsys):
    assert cli.main(argv + FAST) == 2
    err = capsys.readouterr().err
    assert err.startswith("devshim: error: ") and match in err


def test_unknown_experiment_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["bench", "convolution"])
    assert info.value.code == 2
    assert "invalid choice: 'convolution'" in capsys.readouterr().err


def test_table_aligns_numbers_right_and_marks_missing_values():
    rows = [
        {"backend": "numpy", "device": "cpu:0", "operation": "device_of",
         "native_seconds": None, "devshim_seconds": 2.5e-7, "ratio": None},
        {"backend": "numpy", "device": "cpu:0", "operation": "to_device 1 MiB",
         "native_seconds": 3.0e-5, "devshim_seconds": 3.3e-5, "ratio": 1.1},
    ]
    lines = bench.format_table("overhead", rows).splitlines()
    assert lines == [
        "| backend | device | operation       | native | devshim | devshim/native |",
        "|---------|--------|-----------------|-------:|--------:|---------------:|",
        "| numpy   | cpu:0  | device_of       |      - |  250 ns |              - |",
        "| numpy   | cpu:0  | to_device 1 MiB |  30 us |   33 us |          1.10x |",
    ]

"""`devshim bench`: table on stdout, progress on stderr, JSON and PNG files, clear errors,
and every bad path refused before anything is measured."""

from __future__ import annotations

import json
import sys

import pytest

import devshim as ds
from devshim import bench, cli
from devshim.bench.experiments import experiments
from devshim.bench.table import format_spread, format_table
from devshim.timing.settle import NOISE_SHARE
from helpers import run_python

TINY = {
    "matmul": ["--sizes", "4", "8"],
    "logging": ["--size", "4", "--steps", "3"],
    "parallel": ["--size", "8", "--repeats", "2"],
    "transfer": ["--sizes", "0.01", "0.02"],
    "overhead": ["--threads", "1"],
    "guard": ["--size", "4"],
    "startup": [],
    "convert": ["--sizes", "64", "1024"],
    "virtual": ["--examples", "32", "--batch-size", "16"],
    "memory": ["--megabytes", "1", "--width", "256", "--batch", "4"],
}
FAST = ["--min-run-time", "0.002"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_every_experiment_has_tiny_arguments_here():
    assert set(TINY) == set(experiments())


def _experiment_params() -> list:
    """Each experiment; those run with `--backend all` (and `virtual`, torch's virtual GPUs in a
    fresh interpreter) do the same whatever backend the suite selected."""
    return [pytest.param(name, marks=[pytest.mark.same_in_every_pass]
                         if experiments()[name].per_backend or name == "virtual" else [])
            for name in sorted(TINY)]


@pytest.mark.parametrize("experiment", _experiment_params())
def test_each_experiment_prints_a_table_and_writes_json_and_png(experiment, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    data, picture = tmp_path / "rows.json", tmp_path / "plot.png"
    backend = ["--backend", "all"] if experiments()[experiment].per_backend else []
    argv = ["bench", experiment, *backend, *TINY[experiment], *FAST, "--no-progress",
            "--json", str(data), "--plot", str(picture)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    document = json.loads(data.read_text())
    assert document["experiment"] == experiment
    if backend:
        backends, _ = bench.all_backends()
        assert {row["backend"] for row in document["rows"] + document["omitted"]} == set(backends)
        assert set(document["setup"]["backends"]) == set(backends)
    table = [line for line in out.splitlines() if line.startswith("|")]
    # heading, rule, one line per row; none at all when every row was left out (with a line why)
    assert len(table) == (2 + len(document["rows"]) if document["rows"] else 0)
    assert all(row["omitted"] in out for row in document["omitted"]) and (document["rows"] or document["omitted"])
    assert picture.read_bytes().startswith(PNG_MAGIC)
    assert f"wrote {data}" in out and f"wrote {picture}" in out
    for row in document["rows"]:  # every row carries its spread into the JSON
        assert row.get("note") or (any(key.endswith("_iqr") for key in row) and "noisy" in row)


def test_times_in_the_table_carry_their_spread(capsys):
    assert cli.main(["bench", "matmul", *TINY["matmul"], *FAST, "--no-progress"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")][2:]
    assert rows and all("±" in line for line in rows)


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
        'devshim: error: --plot needs matplotlib, which is not installed. Install it with pip install '
        'matplotlib (or pip install "devshim[plot]" where devshim is installed), or leave out --plot.'
    ]
    assert captured.out == "" and not data.exists()  # it failed before measuring anything


@pytest.mark.parametrize("flag, where, match", [
    ("--json", "missing/rows.json", "does not exist"),
    ("--plot", "missing/plot.png", "does not exist"),
    ("--json", ".", "that is a folder"),
    ("--plot", "plot.nosuchformat", "cannot tell the image format"),
])
def test_a_bad_output_path_fails_before_the_run(flag, where, match, tmp_path, capsys, monkeypatch):
    if flag == "--plot":
        pytest.importorskip("matplotlib")
    measured = []
    monkeypatch.setattr(experiments()["matmul"], "run", lambda **kw: measured.append(kw) or [])
    code = cli.main(["bench", "matmul", *TINY["matmul"], flag, str(tmp_path / where)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"devshim: error: {flag} ") and match in err
    assert measured == []


def test_plot_without_matplotlib_in_a_real_process_has_no_traceback(tmp_path):
    code = (
        "import sys\n"
        "sys.modules['matplotlib'] = None\n"
        "from devshim.cli import main\n"
        f"sys.exit(main(['bench', 'matmul', '--sizes', '4', '--plot', {str(tmp_path / 'p.png')!r}]))\n"
    )
    result = run_python(code, DEVSHIM_BACKEND="numpy", timeout=120)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and 'pip install matplotlib' in result.stderr


def test_python_dash_m_devshim_bench_runs(tmp_path):
    result = run_python(
        "", "-m", "devshim", "bench", "logging", "--size", "4", "--steps", "2", *FAST,
        "--no-progress", "--json", str(tmp_path / "l.json"), DEVSHIM_BACKEND="numpy", timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "log to host each step" in result.stdout
    rows = json.loads((tmp_path / "l.json").read_text())["rows"]
    assert [r["host_reads"] for r in rows] == [2, 1]


@pytest.mark.parametrize("argv, match", [
    (["bench", "overhead", "--sizes", "3"], "unrecognized arguments: --sizes"),
    (["bench", "matmul", "--sizes", "1.5"], "invalid int value: '1.5'"),
    (["bench", "logging", "--size", "4", "8"], "unrecognized arguments: 8"),
    (["bench", "transfer", "--steps", "3"], "unrecognized arguments: --steps"),
    (["bench", "convolution"], "invalid choice: 'convolution'"),
])
def test_options_an_experiment_does_not_take_are_argparse_errors(argv, match, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert match in capsys.readouterr().err


def test_an_unknown_backend_is_explained(capsys):
    assert cli.main(["bench", "matmul", "--backend", "caffe", *FAST]) == 2
    err = capsys.readouterr().err
    assert err.startswith("devshim: error: ") and "Unknown backend 'caffe'" in err


def test_each_experiment_has_its_own_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "parallel", "--help"])
    out = capsys.readouterr().out
    assert "--repeats" in out and "--size" in out and "--json" in out


def test_table_aligns_numbers_right_marks_missing_values_and_noisy_rows():
    rows = [
        {"backend": "numpy", "device": "cpu:0", "operation": "device_of", "native_seconds": None,
         "devshim_seconds": 2.5e-7, "devshim_iqr": 1e-8, "ratio": None, "noisy": False},
        {"backend": "numpy", "device": "cpu:0", "operation": "to_device 1 MiB",
         "native_seconds": 3.0e-5, "native_iqr": 6e-6, "devshim_seconds": 3.3e-5, "devshim_iqr": 0.0,
         "ratio": 1.1, "noisy": True},
    ]
    lines = format_table(experiments()["overhead"], rows).splitlines()
    assert lines[:4] == [
        "|   backend | device | operation       |     native |      devshim | devshim/native |",
        "|-----------|--------|-----------------|-----------:|-------------:|---------------:|",
        "|   numpy   | cpu:0  | device_of       |          - | 250 ns ±2.0% |              - |",
        "| * numpy   | cpu:0  | to_device 1 MiB | 30 us ±10% |  33 us ±0.0% |          1.10x |",
    ]
    assert lines[4].startswith("* runs disagree: the middle half of the runs spread over more than ±5% of the median")
    assert len(lines) == 5


def test_rows_whose_warm_up_did_not_settle_get_their_own_mark_and_footnote():
    rows = [
        {"backend": "numpy", "device": "cpu:0", "n": 64, "seconds": 1e-3, "seconds_iqr": 1e-5,
         "noisy": False, "settled": False},
        {"backend": "numpy", "device": "cpu:0", "n": 128, "seconds": 2e-3, "seconds_iqr": 8e-4,
         "noisy": True, "settled": False},
        {"backend": "numpy", "device": "cpu:0", "n": 256, "seconds": 4e-3, "seconds_iqr": 1e-5,
         "noisy": False, "settled": True},
    ]
    lines = format_table(experiments()["matmul"], rows).splitlines()
    assert [line[:5] for line in lines[2:5]] == ["| +  ", "| *+ ", "|    "]
    assert lines[5].startswith("* runs disagree") and lines[6].startswith("+ warm-up did not settle")


def test_only_rows_whose_runs_stalled_are_marked_and_the_footnote_says_what_to_do():
    """A busy machine no longer marks every row: only those whose runs stalled (waited for a CPU,
    or jumped to a slower state) get "~", with advice that names --threads 1 where they ran on
    several threads."""
    rows = [{"backend": "torch", "device": "cpu:0", "size": 64, "seconds": 0.032, "seconds_iqr": 3e-4,
             "noisy": False, "settled": True, "busy": True, "stalled": True, "threads": 2},
            {"backend": "torch", "device": "cpu:0", "size": 256, "seconds": 3e-4, "seconds_iqr": 3e-6,
             "noisy": False, "settled": True, "busy": True, "stalled": False, "threads": 2}]
    lines = format_table(experiments()["matmul"], rows).splitlines()
    assert lines[2].startswith("| ~ torch") and "32 ms ±0.5%" in lines[2]
    assert lines[3].startswith("|   torch")  # the same busy machine, but its runs held steady
    assert lines[4].startswith("~ runs stalled: ") and "--threads 1" in lines[4]
    assert len(lines) == 5 and "!" not in "".join(lines[:4])


def test_a_busy_machine_without_stalls_gets_a_line_and_no_mark():
    rows = [{"backend": "torch", "device": "cpu:0", "size": 64, "seconds": 7e-6, "seconds_iqr": 1e-8,
             "noisy": False, "settled": True, "busy": True, "stalled": False}]
    lines = format_table(experiments()["matmul"], rows).splitlines()
    assert lines[2].startswith("| torch") and lines[3].startswith("The machine was busy") and len(lines) == 4


def test_rows_an_experiment_left_out_are_a_line_not_a_row():
    rows = [{"backend": "numpy", "omitted": "no device here: left out"}]
    assert format_table(experiments()["transfer"], rows) == "no device here: left out"


def test_the_plot_carries_the_tables_marks(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from devshim.bench import plot

    drawn = {}
    saved = Figure.savefig

    def keep(fig, path, **kwargs):
        drawn["labels"] = [t.get_text() for ax in fig.axes for t in ax.get_yticklabels()]
        drawn["texts"] = [t.get_text() for ax in fig.axes for t in ax.texts]
        drawn["notes"] = fig._supxlabel.get_text() if fig._supxlabel is not None else ""
        return saved(fig, path, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    bars = [{"backend": "torch", "operation": "device_of", "ratio": 1.5, "ratio_low": 1.4, "ratio_high": 1.6,
             "stalled": True},
            {"backend": "torch", "operation": "to_device 64 B", "ratio": 1.2, "ratio_low": 1.1, "ratio_high": 1.3}]
    plot.plot(experiments()["overhead"], bars, str(tmp_path / "bars.png"))
    assert drawn["labels"] == ["~ torch: device_of", "torch: to_device 64 B"]
    assert drawn["notes"].startswith("~ runs stalled")
    points = [{"backend": "torch", "device": "cpu:0", "size": n, "gflops": g, "gflops_low": g, "gflops_high": g,
               "noisy": n == 64} for n, g in ((16, 5.0), (64, 50.0))]
    plot.plot(experiments()["matmul"], points, str(tmp_path / "line.png"))
    assert drawn["texts"] == ["*"] and drawn["notes"].startswith("* runs disagree")
    assert (tmp_path / "line.png").read_bytes().startswith(PNG_MAGIC)


def test_a_time_from_a_single_run_shows_no_spread():
    rows = [{"backend": "torch", "device": "cpu:0", "n": 64, "seconds": 0.439, "seconds_iqr": 0.0, "runs": 1}]
    assert "439 ms (1 run)" in format_table(experiments()["matmul"], rows)


@pytest.mark.parametrize("share", [0.0, 0.02, 0.0999, 0.1, 0.1001, 0.104, 0.11, 0.12, 0.14, 0.19, 0.2, 0.5])
def test_the_spread_shown_exceeds_the_footnotes_threshold_exactly_when_the_row_is_flagged(share):
    """The footnote says flagged rows spread over more than ±5%: no flagged row may show ±5% or less,
    and no row showing more may go unflagged (rounding used to show a flagged 10.4% as ±5%)."""
    shown = float(format_spread(share * 2.0, 2.0).strip("±%"))
    flagged = ds.Measurement([2.0 - 2 * share, 2.0, 2.0 + 2 * share], number_per_run=1).noisy  # IQR 2 * share
    assert (shown > NOISE_SHARE * 50) == flagged == (share > NOISE_SHARE)


def test_threads_apply_where_the_framework_can_set_them_and_the_others_say_so(capsys):
    """--threads N with --backend all: torch measures on N threads; a framework that cannot change
    its threads while running keeps its own, and stderr says so (its rows show none)."""
    argv = ["bench", "matmul", "--backend", "all", "--sizes", "4", "--threads", "2", *FAST, "--no-progress"]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    backends, _ = bench.all_backends()
    for name in backends:
        settable = hasattr(experiment_ops(name), "set_threads")
        said = f"--threads: {name} cannot change its CPU threads while running" in captured.err
        assert said != settable
    if "torch" in backends:
        rows = [line for line in captured.out.splitlines() if line.startswith("| ") and "torch" in line]
        assert rows and all(line.rstrip(" |").endswith("2") for line in rows if "cpu:0" in line)


def experiment_ops(name):
    from devshim.bench.experiment import ops_for

    return ops_for(name)

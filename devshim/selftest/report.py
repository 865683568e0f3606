"""The text of `devshim selftest`'s report, from the data `devshim.selftest.run` returns."""

from __future__ import annotations

import itertools

from devshim.bench.experiments import experiments
from devshim.bench.table import _MARKS, format_table

__all__ = ["format_report"]

_MARK = {"passed": "PASS", "failed": "FAIL", "skipped": "skip"}


def _memory(num_bytes) -> str:
    return f", {num_bytes / 2**30:.1f} GiB" if num_bytes else ""


def _highlights(section: dict) -> list:
    """One line per GPU: how it compares with the CPU at the largest matmul, and its bandwidth."""
    rows = section["measurements"].get("matmul", [])
    lines = []
    if rows:
        largest = max(row["size"] for row in rows)
        at = [row for row in rows if row["size"] == largest]
        cpu = next((row for row in at if row["device"].startswith("cpu")), None)
        for row in at:
            if row is cpu or cpu is None:
                continue
            virtual = " (computed on the CPU: says nothing about GPUs)" if "virtual" in row["device"] else ""
            lines.append(f"{row['device']}: {row['gflops']:.0f} GFLOP/s at n={largest}, "
                         f"{row['cpu_over_device']:.1f}x the CPU's {cpu['gflops']:.0f}{virtual}"
                         f"{_doubt(row, cpu)}")
    for row in section["measurements"].get("transfer", []):
        if "omitted" in row:  # no device: a host-to-host copy is no transfer (the experiment says so)
            lines.append(f"host -> device: not measured, no device here for {row['backend']} (no GPU, real or virtual)")
        elif row["direction"] == "host->device":
            lines.append(f"host -> {row['device']}: {row['gb_per_s']:.1f} GB/s ({row['megabytes']:g} MiB)"
                         f"{_doubt(row)}")
    return lines


def _doubt(*rows: dict) -> str:
    """Plain words after a highlight whose figures are not to be trusted (see the table's marks)."""
    said = [words for _, carried, words in _MARKS if any(carried(row) for row in rows)]
    return f" ({' and '.join(said)}: measure again before trusting it)" if said else ""


def _merged(results: list) -> list:
    """The results, shorter: a check that went the same way on several devices is one line
    naming them all, and a group whose checks were all skipped for one reason is one line."""
    merged: list = []
    for r in results:
        last = merged[-1] if merged else None
        if (last is not None and r["where"] and last["where"]
                and all(last[k] == r[k] for k in ("group", "check", "status", "detail"))):
            last["where"] += ", " + r["where"]
        else:
            merged.append(dict(r))
    shorter: list = []
    for _, grouped in itertools.groupby(merged, key=lambda r: r["group"]):
        block = list(grouped)
        if len(block) > 1 and all(r["status"] == "skipped" and r["detail"] == block[0]["detail"] for r in block):
            shorter.append({**block[0], "check": f"all {len(block)} checks", "where": ""})
        else:
            shorter.extend(block)
    return shorter


def _result_lines(results: list) -> list:
    """One line per (merged) result: mark, group, check, where it ran, and the detail."""
    results = _merged(results)
    groups = max((len(r["group"]) for r in results), default=0)
    lines = []
    for r in results:
        where = f" on {r['where']}" if r["where"] else ""
        detail = f": {r['detail']}" if r["detail"] else ""
        lines.append(f"{_MARK[r['status']]}  {r['group']:<{groups}}  {r['check']}{where}{detail}")
    return lines


def format_report(document: dict) -> str:
    """The report as text: header, one section per backend, measurements, verdict.

    Example:
        >>> print(format_report(run(["numpy"])))
        devshim selftest: devshim 0.1.0, Python 3.11.7, Linux 6.8.0 x86_64, 2 CPUs
        ...
    """
    lines = [
        f"devshim selftest: devshim {document['devshim']}, Python {document['python']}, "
        f"{document['platform']}, {document['cpu_count']} CPUs",
        "environment: " + " ".join(f"{k}={v if v is not None else '(unset)'}"
                                   for k, v in document["environment"].items()),
    ]
    for section in document["backends"]:
        version = section.get("version") or "?"
        lines += ["", f"{section['name']} ({section.get('title', section['name'])} {version})"]
        lines += [f"  note: {note}" for note in section["notes"]]
        for device in section.get("devices", []):
            virtual = ", virtual" if device.get("virtual") else ""
            lines.append(f"  device {device['device']}: {device['name']}{_memory(device.get('memory_bytes'))}{virtual}")
        lines += _memory_lines(section.get("memory", []))
        lines += [f"  {line}" for line in _result_lines(section["results"])]
        lines += [f"  measured  {line}" for line in _highlights(section)]
    if document["not_checked"]:
        lines += ["", "not checked: " + "; ".join(f"{k}: {v}" for k, v in document["not_checked"].items())]
    for name, heading in (("matmul", "matmul (float32, n x n): GFLOP/s on the CPU and each GPU"),
                          ("transfer", "bandwidth between the host and each GPU")):
        rows = [row for section in document["backends"] for row in section["measurements"].get(name, [])]
        if rows:
            lines += ["", f"{heading}:", format_table(experiments()[name], rows)]
    summary = document["summary"]
    lines += ["", f"{summary['passed']} passed, {summary['failed']} failed, {summary['skipped']} skipped "
                  f"in {summary['seconds']:g} s", f"verdict: {document['verdict']}"]
    return "\n".join(lines)


def _memory_lines(records: list) -> list:
    """One line per device: what `ds.memory` says of it ("-": the framework does not say)."""
    from devshim.backends.memory_base import format_bytes

    lines = []
    for record in records:
        if "error" in record:
            lines.append(f"  memory {record['device']}: error: {record['error']}")
            continue
        figures = ", ".join(f"{name.replace('_', ' ')} {'-' if record[name] is None else format_bytes(record[name])}"
                            for name in ("in_use", "reserved", "peak", "total", "free"))
        lines.append(f"  memory {record['device']}: {figures} ({record['source']})")
    return lines

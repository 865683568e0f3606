"""The `devshim` command (also `python -m devshim`).

`devshim info` prints the backend devshim picks and why, each backend with
its framework's version and what it can do, the devices each one sees, and,
under a launcher (torchrun, Slurm, Open MPI, Horovod), which process this is.
`devshim bench` runs the experiments (`devshim.bench`).
`devshim selftest` checks devshim on this machine's frameworks and GPUs and
prints a report for bug reports (`devshim.selftest`).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys

import devshim
from devshim import settings
from typing import Any, Callable, Optional, TextIO

from devshim.backends import canonical_name, get_backend, load_backend, selection_reason, specs
from devshim.errors import BackendError, DevshimError
from devshim.selftest.runner import memory_records

__all__ = ["main", "collect_info", "print_info", "build_parser", "setting_problems"]

#: The variables `devshim info` shows and checks.
ENVIRONMENT_VARS = (settings.BACKEND_VAR, settings.DEVICE_VAR, settings.VIRTUAL_DEVICES_VAR,
                    settings.TRANSFER_GUARD_VAR, settings.VIRTUAL_MEMORY_VAR)


def _check_backend() -> None:
    """An unknown name in DEVSHIM_BACKEND, or a framework there that is not installed."""
    name = settings.requested_backend()
    if name is not None:
        spec = specs()[canonical_name(name)]
        if not spec.is_installed():
            raise BackendError(f"{settings.BACKEND_VAR}={name!r} asks for {spec.title}, which is not "
                               f"installed here. Install it ({spec.install_hint()}), or unset it.")


#: (what is checked, how): each read raises DevshimError on a value devshim cannot use.
_SETTING_CHECKS: tuple = (
    (settings.BACKEND_VAR, _check_backend),
    (settings.DEVICE_VAR, settings.accelerators_hidden),
    (settings.VIRTUAL_DEVICES_VAR, settings.virtual_device_count),
    (settings.TRANSFER_GUARD_VAR, settings.default_guard_level),
    ("launcher variables", settings.launcher),
    (settings.VIRTUAL_MEMORY_VAR, settings.virtual_memory),
)


def setting_problems() -> list:
    """One `{"setting": ..., "error": ...}` per `DEVSHIM_*` (or launcher) variable whose
    value devshim cannot use; empty when every setting is fine. `devshim info` exits with
    status 2 when there is any.

    Example:
        >>> os.environ["DEVSHIM_BACKEND"] = "pytroch"; ds.settings.reload()
        >>> setting_problems()
        [{'setting': 'DEVSHIM_BACKEND', 'error': "Unknown backend 'pytroch'. Valid names: ..."}]
    """
    problems = []
    for setting, check in _SETTING_CHECKS:
        try:
            check()
        except DevshimError as err:
            problems.append({"setting": setting, "error": str(err)})
    return problems


def _framework_entry(name: str, spec: Any) -> dict:
    entry: dict = {"name": name, "title": spec.title, "version": spec.version(),
                   "capabilities": spec.capabilities()}
    if not spec.is_installed():
        entry["status"] = f"not installed ({spec.install_hint()})"
        return entry
    try:
        adapter = load_backend(name)
        entry["devices"] = adapter.device_details()
        entry["status"] = "ok"
        entry["memory"] = memory_records(name, [dev["device"] for dev in entry["devices"]], _error_text)
    except Exception as err:  # report any framework failure, keep listing the rest
        entry["status"] = f"error: {_error_text(err)}"
    return entry


def _error_text(err: Exception) -> str:
    """`Type: message`: how `devshim info` shows a failure it reports and lists past."""
    return f"{type(err).__name__}: {err}"


def collect_info() -> dict:
    """Everything `devshim info` reports, as plain data; `problems` lists the settings
    devshim cannot use (`setting_problems()`).

    Example:
        >>> collect_info()["backend"]
        'torch'
    """
    info: dict = {
        "devshim": devshim.__version__,
        "python": sys.version.split()[0],
        "environment": {var: os.environ.get(var) for var in ENVIRONMENT_VARS},
        "problems": setting_problems(),
    }
    try:
        info["backend"] = get_backend().name
        info["reason"] = selection_reason()
    except DevshimError as err:
        info["backend"], info["reason"] = None, f"error: {err}"
    info["frameworks"] = [_framework_entry(name, spec) for name, spec in specs().items()]
    info["process"] = _process()
    return info


def _process() -> Optional[dict]:
    """`ds.process_info()` as plain data under a launcher; None without one."""
    try:
        if settings.launcher() is None:
            return None
        from devshim.distributed import process_info

        return process_info().as_dict()
    except Exception as err:  # report it, keep printing the rest (as for the frameworks)
        return {"error": _error_text(err)}


def print_info(info: dict, out: Optional[TextIO] = None) -> None:
    """Print `collect_info()`'s data as the text `devshim info` shows.

    Example:
        >>> print_info(collect_info())
        devshim 0.1.0 on Python 3.11.7
        backend: torch  (auto: torch is the first installed of torch, tensorflow, jax, mxnet, cupy, numpy)
    """
    write = functools.partial(print, file=out or sys.stdout)
    write(f"devshim {info['devshim']} on Python {info['python']}")
    write(f"backend: {info['backend']}  ({info['reason']})")
    for var, value in info["environment"].items():
        write(f"  {var}={value if value is not None else '(unset)'}")
    _print_problems(info.get("problems", []), write)
    write("\nframeworks:")
    for fw in info["frameworks"]:
        write(f"  {fw['name']:<11} {fw['version'] or '-':<14} {fw['status']}")
    _print_capabilities(info["frameworks"], write)
    _print_process(info.get("process"), write)
    _print_devices(info["frameworks"], write)
    _print_memory(info["frameworks"], write)


def _print_problems(problems: list, write: Callable[..., None]) -> None:
    if problems:
        write("\nsettings devshim cannot use (devshim info exits with status 2):")
        for problem in problems:
            write(f"  {problem['setting']}: {problem['error']}")


def _print_capabilities(frameworks: list, write: Callable[..., None]) -> None:
    """What each backend can do here: "yes" and "-" per capability where its framework is in
    use, and what stands in the way where it is not (not installed, or failing: its line
    under frameworks says why)."""
    capabilities = list(frameworks[0]["capabilities"]) if frameworks else []
    write("\ncapabilities:")
    write("  " + " " * 11 + " ".join(f"{c:<8}" if len(c) <= 8 else c for c in capabilities))
    for fw in frameworks:
        status = fw.get("status", "ok")
        if status != "ok":
            unusable = "unusable here (its line under frameworks says why)"
            write(f"  {fw['name']:<11}{'not installed' if status.startswith('not installed') else unusable}")
            continue
        marks = ["yes" if fw["capabilities"][c] else "-" for c in capabilities]
        write(f"  {fw['name']:<11}" + " ".join(f"{m:<{max(8, len(c))}}" for m, c in zip(marks, capabilities)).rstrip())


def _print_process(process: Optional[dict], write: Callable[..., None]) -> None:
    if process is None:
        return
    write("\nprocess:")
    if "error" in process:
        write(f"  error: {process['error']}")
        return

    def known(value: object) -> object:
        return "?" if value is None else value

    write(f"  launcher: {process['launcher']}  rank {known(process['rank'])} of "
          f"{known(process['world_size'])}, local rank {process['local_rank']} of "
          f"{known(process['local_world_size'])}")
    write(f"  device:   {process['device']} ({process['backend']})")


def _print_devices(frameworks: list, write: Callable[..., None]) -> None:
    write("\ndevices:")
    for fw in frameworks:
        for dev in fw.get("devices", []):
            extra = "  (virtual)" if dev.get("virtual") else ""
            size = dev.get("memory_bytes")
            memory = f"  {size / 2**30:.1f} GiB" if size else ""
            write(f"  {fw['name']:<11} {dev['device']:<7} {dev['name']}{memory}{extra}")


def _cmd_info(args: argparse.Namespace) -> int:
    info = collect_info()
    if args.json:
        json.dump(info, sys.stdout, indent=2, default=str)
        print()
    else:
        print_info(info)
    problems = info["problems"]
    if problems and args.json:  # stdout is the JSON document: the reasons go to stderr
        for problem in problems:
            print(f"devshim: error: {problem['setting']}: {problem['error']}", file=sys.stderr)
    elif problems:
        print(f"devshim: error: {', '.join(p['setting'] for p in problems)}: a value devshim cannot "
              f"use (see 'settings devshim cannot use' above)", file=sys.stderr)
    return 2 if problems else 0


def build_parser() -> argparse.ArgumentParser:
    """The `devshim` argument parser, with its `info`, `bench` and `selftest` commands."""
    parser = argparse.ArgumentParser(prog="devshim", description=(__doc__ or "devshim").splitlines()[0])
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    info = commands.add_parser("info", help="backends, their capabilities, and the devices devshim sees")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    info.set_defaults(run=_cmd_info)
    from devshim import bench, selftest

    bench.register(commands)
    selftest.register(commands)
    return parser


def main(argv: Optional[list] = None) -> int:
    """Run the `devshim` command; returns the exit status.

    Example:
        >>> main(["info"])
        0
    """
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except DevshimError as err:
        print(f"devshim: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


# ------------------------------------------------------------------ memory


def _print_memory(frameworks: list, write: Callable[..., None]) -> None:
    """Each device's memory (`ds.memory`): "-" where the framework cannot say."""
    from devshim.backends.memory_base import format_bytes

    def shown(value: object) -> str:
        return "-" if value is None else format_bytes(value)

    write("\nmemory (ds.memory; '-': the framework does not say):")
    write(f"  {'':<11} {'device':<7} {'in use':>10} {'reserved':>10} {'peak':>10} {'total':>10} {'free':>10}")
    for fw in frameworks:
        for entry in fw.get("memory", []):
            if "error" in entry:
                write(f"  {fw['name']:<11} {entry['device']:<7} error: {entry['error']}")
                continue
            figures = " ".join(f"{shown(entry[k]):>10}" for k in ("in_use", "reserved", "peak", "total", "free"))
            write(f"  {fw['name']:<11} {entry['device']:<7} {figures}  {entry['source']}")

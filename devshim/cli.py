"""The ``devshim`` command (also ``python -m devshim``).

``devshim info`` prints the backend devshim picks and why, each backend with
its framework's version and what it can do, the devices each one sees, and,
under a launcher (torchrun, Slurm, Open MPI, Horovod), which process this is.
``devshim bench`` runs the experiments (``devshim.bench``).
``devshim selftest`` checks devshim on this machine's frameworks and GPUs and
prints a report for bug reports (``devshim.selftest``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import devshim
from devshim import settings
from devshim.backends import get_backend, load_backend, selection_reason, specs
from devshim.errors import DevshimError

__all__ = ["main", "collect_info", "print_info", "build_parser"]


def collect_info() -> dict:
    """Everything ``devshim info`` reports, as plain data.

    Example:
        >>> collect_info()["backend"]
        'torch'
    """
    info: dict = {
        "devshim": devshim.__version__,
        "python": sys.version.split()[0],
        "environment": {
            var: os.environ.get(var)
            for var in (settings.BACKEND_VAR, settings.DEVICE_VAR, settings.VIRTUAL_DEVICES_VAR)
        },
    }
    try:
        info["backend"] = get_backend().name
        info["reason"] = selection_reason()
    except DevshimError as err:
        info["backend"], info["reason"] = None, f"error: {err}"
    frameworks: list = []
    for name, spec in specs().items():
        entry: dict = {"name": name, "title": spec.title, "version": spec.version(),
                       "capabilities": spec.capabilities()}
        if not spec.is_installed():
            entry["status"] = f"not installed ({spec.install_hint()})"
        else:
            try:
                adapter = load_backend(name)
                entry["devices"] = adapter.device_details()
                entry["status"] = "ok"
            except Exception as err:  # report any framework failure, keep listing the rest
                entry["status"] = f"error: {type(err).__name__}: {err}"
        frameworks.append(entry)
    info["frameworks"] = frameworks
    info["process"] = _process()
    return info


def _process():
    """``ds.process_info()`` as plain data under a launcher; None without one."""
    try:
        if settings.launcher() is None:
            return None
        from devshim.distributed import process_info

        return process_info().as_dict()
    except Exception as err:  # report it, keep printing the rest (as for the frameworks)
        return {"error": f"{type(err).__name__}: {err}"}


def _format_memory(num_bytes) -> str:
    return f"{num_bytes / 2**30:.1f} GiB" if num_bytes else ""


def print_info(info: dict, out=None) -> None:
    """Print ``collect_info()``'s data as the text ``devshim info`` shows."""
    out = out or sys.stdout

    def write(line: str = "") -> None:
        print(line, file=out)

    write(f"devshim {info['devshim']} on Python {info['python']}")
    write(f"backend: {info['backend']}  ({info['reason']})")
    for var, value in info["environment"].items():
        write(f"  {var}={value if value is not None else '(unset)'}")
    write()
    write("frameworks:")
    for fw in info["frameworks"]:
        write(f"  {fw['name']:<11} {fw['version'] or '-':<14} {fw['status']}")
    write()
    capabilities = list(info["frameworks"][0]["capabilities"]) if info["frameworks"] else []
    write("capabilities:")
    write("  " + " " * 11 + " ".join(f"{c:<8}" if len(c) <= 8 else c for c in capabilities))
    for fw in info["frameworks"]:
        marks = ["yes" if fw["capabilities"][c] else "-" for c in capabilities]
        write(f"  {fw['name']:<11}" + " ".join(f"{m:<{max(8, len(c))}}" for m, c in zip(marks, capabilities)).rstrip())
    process = info.get("process")
    if process is not None:
        write()
        write("process:")
        if "error" in process:
            write(f"  error: {process['error']}")
        else:
            def known(value):
                return "?" if value is None else value

            write(f"  launcher: {process['launcher']}  rank {known(process['rank'])} of "
                  f"{known(process['world_size'])}, local rank {process['local_rank']} of "
                  f"{known(process['local_world_size'])}")
            write(f"  device:   {process['device']} ({process['backend']})")
    write()
    write("devices:")
    for fw in info["frameworks"]:
        for dev in fw.get("devices", []):
            extra = "  (virtual)" if dev.get("virtual") else ""
            memory = _format_memory(dev.get("memory_bytes"))
            write(f"  {fw['name']:<11} {dev['device']:<7} {dev['name']}{'  ' + memory if memory else ''}{extra}")


def _cmd_info(args: argparse.Namespace) -> int:
    info = collect_info()
    if args.json:
        json.dump(info, sys.stdout, indent=2, default=str)
        print()
    else:
        print_info(info)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``devshim`` argument parser, with its ``info``, ``bench`` and ``selftest`` commands."""
    parser = argparse.ArgumentParser(prog="devshim", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    info = commands.add_parser("info", help="backends, their capabilities, and the devices devshim sees")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    info.set_defaults(run=_cmd_info)
    from devshim import bench, selftest

    bench.register(commands)
    selftest.register(commands)
    return parser


def main(argv=None) -> int:
    """Run the ``devshim`` command; returns the exit status.

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

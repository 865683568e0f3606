"""The ``devshim`` command (also ``python -m devshim``).

``devshim info`` prints the backend devshim picks and why, the frameworks
installed with their versions, and the devices each one sees.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import metadata
from typing import Any, Dict, List, Optional

import devshim
from devshim import config
from devshim.backends import BACKEND_NAMES, _ADAPTERS, _adapter_class, get_backend, load_backend, selection_reason

def _version(name: str) -> Optional[str]:
    if name in _ADAPTERS:
        return _adapter_class(name).version()
    try:  # a framework devshim has no adapter for yet: its pip package has its name
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def collect_info() -> Dict[str, Any]:
    """Everything ``devshim info`` reports, as plain data."""
    info: Dict[str, Any] = {
        "devshim": devshim.__version__,
        "python": sys.version.split()[0],
        "environment": {
            var: os.environ.get(var)
            for var in (config.BACKEND_VAR, config.DEVICE_VAR, config.VIRTUAL_DEVICES_VAR)
        },
    }
    try:
        info["backend"] = get_backend().name
        info["reason"] = selection_reason()
    except devshim.DevshimError as err:
        info["backend"], info["reason"] = None, f"error: {err}"
    frameworks: List[Dict[str, Any]] = []
    for name in BACKEND_NAMES:
        entry: Dict[str, Any] = {"name": name, "version": _version(name)}
        if name not in _ADAPTERS:
            entry["status"] = "no devshim adapter in this version"
        elif entry["version"] is None:
            entry["status"] = f'not installed (pip install "devshim[{name}]")'
        else:
            try:
                adapter = load_backend(name)
                entry["devices"] = adapter.device_details()
                entry["status"] = "ok"
            except Exception as err:  # report any framework failure, keep listing the rest
                entry["status"] = f"error: {type(err).__name__}: {err}"
        frameworks.append(entry)
    info["frameworks"] = frameworks
    return info


def _format_memory(num_bytes: Optional[int]) -> str:
    return f"{num_bytes / 2**30:.1f} GiB" if num_bytes else ""


def print_info(info: Dict[str, Any], out=None) -> None:
    out = out or sys.stdout
    write = lambda line="": print(line, file=out)  # noqa: E731
    write(f"devshim {info['devshim']} on Python {info['python']}")
    write(f"backend: {info['backend']}  ({info['reason']})")
    for var, value in info["environment"].items():
        write(f"  {var}={value if value is not None else '(unset)'}")
    write()
    write("frameworks:")
    for fw in info["frameworks"]:
        write(f"  {fw['name']:<11} {fw['version'] or '-':<14} {fw['status']}")
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
    parser = argparse.ArgumentParser(prog="devshim", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    info = commands.add_parser("info", help="backend, frameworks and devices devshim sees")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    info.set_defaults(run=_cmd_info)
    from devshim import bench  # the `bench` subcommand lives with the experiments

    bench.register(commands)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except devshim.DevshimError as err:
        print(f"devshim: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

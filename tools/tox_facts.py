"""What tox.ini states once, read by the tools rather than written again in them: the virtual
GPUs each backend's env tests on, and the releases each env pins.

tox.ini is where CI reads these facts (it cannot read them from anywhere else), so it is their
one written place: `tools/gpu_check.py` (its virtual passes, the packages it names for the
suite) and `tools/version_sweep.py` (its virtual passes, the newest releases) read them here, and
`tests/test_gpu_check.py` checks that every backend with virtual devices has its count there.

    >>> virtual_devices("jax")             # [testenv:jax]: env DEVSHIM_VIRTUAL_DEVICES=4 pytest
    4
    >>> pins("torch")["array-api-compat"]  # [testenv:torch]: deps
    '1.16.0'
"""

from __future__ import annotations

import configparser
import re
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOX_INI = ROOT / "tox.ini"
VIRTUAL_VAR = "DEVSHIM_VIRTUAL_DEVICES"
_VIRTUAL = re.compile(rf"\b{VIRTUAL_VAR}\s*=\s*(\d+)")
_PIN = re.compile(r"^\s*([A-Za-z0-9_.\-\[\]]+)\s*==\s*([0-9][0-9A-Za-z.+\-]*)\s*(?:#.*)?$")


@lru_cache(maxsize=None)
def _config(path: Path = TOX_INI) -> configparser.ConfigParser:
    config = configparser.ConfigParser(interpolation=None, strict=False)
    config.read(path, encoding="utf-8")
    return config


def _section(env: str):
    config = _config()
    name = f"testenv:{env}"
    return config[name] if config.has_section(name) else None


def envs() -> list:
    """The envs of tox.ini's envlist, in its order.

    Example:
        >>> envs()[:3]
        ['lint', 'numpy', 'py39-floor']
    """
    listed = _config()["tox"].get("envlist", "")
    return [name.strip() for name in re.split(r"[,\s]+", listed) if name.strip()]


def virtual_devices(env: str) -> int:
    """The virtual GPUs env `env` runs a pass on (its commands' or setenv's
    `DEVSHIM_VIRTUAL_DEVICES=N`); 0 where it has none, or no such env exists.

    Example:
        >>> virtual_devices("torch"), virtual_devices("numpy")
        (2, 0)
    """
    section = _section(env)
    if section is None:
        return 0
    text = "\n".join(section.get(key, "") for key in ("commands", "setenv"))
    counts = [int(found) for found in _VIRTUAL.findall(text)]
    return max(counts, default=0)


def pins(env: str) -> dict:
    """{distribution: version} of the releases env `env` pins in its deps (`name==version`).

    Example:
        >>> pins("jax")
        {'jax': '0.10.2', 'jaxlib': '0.10.2'}
    """
    section = _section(env)
    found: dict = {}
    for line in (section.get("deps", "") if section is not None else "").splitlines():
        match = _PIN.match(line)
        if match:
            found[match.group(1).lower()] = match.group(2)
    return found


def pinned(env: str, distribution: str) -> str:
    """`distribution==version` as env `env` pins it; KeyError naming the env where it does not.

    Example:
        >>> pinned("torch", "expecttest")
        'expecttest==0.3.0'
    """
    version = pins(env).get(distribution.lower())
    if version is None:
        raise KeyError(f"tox.ini's [testenv:{env}] pins no {distribution} (its deps: {pins(env)})")
    return f"{distribution}=={version}"

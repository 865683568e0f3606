"""mkdocs hooks (mkdocs.yml): the docs site's lists of backends, read from devshim's backend
folders when the site is built, so that a new backend's folder and its page, `docs/<name>.md`,
are all the docs need. `docs/backends.md`'s tables of names and of what each backend can do
stand where the page has `<!-- backends: names -->` and `<!-- backends: capabilities -->`, and
the navigation's "Backends" section lists each backend's page after that one.

Example:
    >>> print(names_table().splitlines()[2])
    | `torch` | `pytorch` | PyTorch | `pip install "devshim[torch]"` | [PyTorch](torch.md) |
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MARKERS = {"names": "<!-- backends: names -->", "capabilities": "<!-- backends: capabilities -->"}
SECTION = "Backends"


def rows() -> dict:
    """name -> `BackendSpec` of devshim's own backend folders, in automatic-selection order."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # devshim's source: the docs env does not install it
    from devshim.backends.registry import specs

    return {name: spec for name, spec in specs().items() if spec.package == f"devshim.backends.{name}"}


def names_table() -> str:
    """The backends' names, aliases, frameworks, extras and pages, one row each."""
    lines = ["| name | aliases | framework | extra | page |", "| --- | --- | --- | --- | --- |"]
    for name, spec in rows().items():
        aliases = ", ".join(f"`{alias}`" for alias in spec.aliases)
        partner = f" ({rows()[spec.host_partner].title} is its host partner)" if spec.host_partner else ""
        extra = f'`pip install "devshim[{spec.extra}]"`' if spec.extra else "(devshim's own dependency)"
        lines.append(f"| `{name}` | {aliases} | {spec.title}{partner} | {extra} | [{spec.title}]({name}.md) |")
    return "\n".join(lines)


def capabilities_table() -> str:
    """What each backend can do: `devshim info`'s table (the modules its folder has)."""
    found = {name: spec.capabilities() for name, spec in rows().items()}
    columns = list(next(iter(found.values())))
    lines = ["| backend | " + " | ".join(columns) + " |", "| --- " * (len(columns) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join("yes" if has else "-" for has in row.values()) + " |"
              for name, row in found.items()]
    return "\n".join(lines)


def on_page_markdown(markdown: str, page, config, files) -> str:
    """The tables, where a page asks for them."""
    tables = {"names": names_table, "capabilities": capabilities_table}
    for key, marker in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, tables[key]())
    return markdown


def on_config(config):
    """The "Backends" section of the navigation: its first page, then each backend's page, then the
    pages mkdocs.yml lists after the first (libraries above the backends, such as Keras 3)."""
    for entry in config.nav or []:
        if isinstance(entry, dict) and SECTION in entry:
            first, *after = entry[SECTION]
            entry[SECTION] = [first] + [{spec.title: f"{name}.md"} for name, spec in rows().items()] + after
    return config

"""MkDocs hooks for devshim's docs site (mkdocs.yml names this file under ``hooks``).

Pages written on other branches: ``docs/distributed.md`` ("More than one process") comes with
the multi-process work. Until that page exists in ``docs/``, a short stand-in page is generated
under the same name, so the navigation, and links to it, hold in a strict build either way. Once
the real page is there this hook does nothing: nothing here needs editing when it lands.
"""

from __future__ import annotations

from mkdocs.structure.files import File

PENDING = {
    "distributed.md": (
        "# More than one process\n\n"
        "!!! note \"This page is not written yet\"\n"
        "    Running devshim code in several processes (launchers, `process_info`,\n"
        "    `init_distributed`, hierarchical allreduce, `examples/ddp.py`) is documented on this\n"
        "    page once that work is merged. Until then, see [placing models](placement.md) for\n"
        "    data parallelism over the GPUs of one process.\n"
    ),
}


def on_files(files, config):
    """Add a generated stand-in for each pending page that ``docs/`` does not have."""
    for name, text in PENDING.items():
        if files.get_file_from_path(name) is None:
            files.append(File.generated(config, name, content=text))
    return files

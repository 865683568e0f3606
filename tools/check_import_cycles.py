"""Fail when any two modules of devshim import each other, directly or through others.

import-linter's layer contracts forbid imports that climb a layer; this check covers
what they cannot, a circle inside one layer. Every import counts, at module level or
inside a function. Run by ``tox -e lint``.

Example:
    $ PYTHONPATH=. python tools/check_import_cycles.py
    no import cycle among 131 devshim modules
"""

from __future__ import annotations

import sys

import grimp


def import_cycles(package: str) -> tuple:
    """(cycles, module count): the strongly connected components of more than one module."""
    graph = grimp.build_graph(package)
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    cycles: list = []
    counter = 0

    def visit(module: str) -> None:
        nonlocal counter
        index[module] = low[module] = counter
        counter += 1
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in graph.modules:
                continue
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles, len(graph.modules)


def main() -> int:
    cycles, count = import_cycles("devshim")
    if cycles:
        for cycle in cycles:
            print("import cycle: " + " <-> ".join(cycle))
        return 1
    print(f"no import cycle among {count} devshim modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())

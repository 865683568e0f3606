"""Fail when a function in devshim/ is longer than LIMIT lines of code.

Lines of code: the function's own lines, its nested functions and classes included, without
its docstring, blank lines or lines that hold only a comment. Cyclomatic complexity (at most
20) is ruff's rule C901, configured in pyproject.toml; this script checks the length.

A function that a measured hot path keeps long is named in EXCEPTIONS with the figure that
justifies it; an exception that no longer applies fails the check too, so the list stays true.

    python tools/check_function_size.py            # exit 1 and a list when one is too long
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

LIMIT = 50
ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "devshim"

#: "path:qualified name" -> why it may be longer (a measured figure).
EXCEPTIONS: dict = {}


def _code_lines(source: str) -> set:
    """Line numbers that hold code: not blank, not only a comment."""
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                          tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        lines.update(range(token.start[0], token.end[0] + 1))
    return lines


def _docstring_lines(node) -> set:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return set(range(body[0].lineno, body[0].end_lineno + 1))
    return set()


def _functions(tree, prefix=""):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from _functions(node, f"{name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")


def measure(path: Path) -> list:
    """``(lines of code, qualified name)`` for every function in ``path``."""
    source = path.read_text(encoding="utf-8")
    code = _code_lines(source)
    found = []
    for name, node in _functions(ast.parse(source)):
        first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
        span = set(range(first, node.end_lineno + 1)) - _docstring_lines(node)
        found.append((len(span & code), name))
    return found


def main() -> int:
    too_long, seen = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        for lines, name in measure(path):
            key = f"{relative}:{name}"
            if key in EXCEPTIONS:
                seen.add(key)
                continue
            if lines > LIMIT:
                too_long.append(f"{key}: {lines} lines of code (limit {LIMIT})")
    stale = [f"{key}: listed in EXCEPTIONS but gone or short now" for key in EXCEPTIONS
             if key not in seen]
    for line in too_long + stale:
        print(line)
    if too_long or stale:
        print(f"\n{len(too_long) + len(stale)} problem(s). Split long functions into named steps; "
              f"a measured hot path may be listed in EXCEPTIONS with its figure.")
        return 1
    print(f"every function in devshim/ has at most {LIMIT} lines of code")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Reading and rewriting a kernel file's module-level literals (`KOPT_CONFIG`,
`KOPT_TUNABLES`, tuning constants) without executing it: what the accelerator's search and
the optimizer's hypotheses change between trials."""

from __future__ import annotations

import ast
from typing import Any


def literal(source: str, name: str) -> Any:
    """The value of module-level `name = <literal>` in `source`, or None."""
    node = _assignment(source, name)
    if node is None:
        return None
    try:
        return ast.literal_eval(node.value)
    except ValueError:
        return None


def _assignment(source: str, name: str) -> ast.Assign | None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name):
            return node
    return None


def replace_value(source: str, name: str, value: Any) -> str:
    """`source` with the literal assigned to module-level `name` replaced by `repr(value)`."""
    node = _assignment(source, name)
    if node is None:
        raise ValueError(f"no module-level assignment to {name}")
    lines = source.splitlines(keepends=True)
    v = node.value
    start = sum(len(line) for line in lines[: v.lineno - 1]) + _byte_col(lines[v.lineno - 1],
                                                                          v.col_offset)
    end = sum(len(line) for line in lines[: v.end_lineno - 1]) + _byte_col(
        lines[v.end_lineno - 1], v.end_col_offset)
    return source[:start] + repr(value) + source[end:]


def _byte_col(line: str, col: int) -> int:
    """ast columns count UTF-8 bytes; the string index of that column."""
    return len(line.encode()[:col].decode(errors="ignore"))

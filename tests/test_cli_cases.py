"""`kopt cases` at a terminal's width: names whole, one line per case, descriptions cut."""

from __future__ import annotations

import pytest
from rich.console import Console

from kopt.workbench.commands.cases import cases_table

ROWS = [
    {"name": "matmul_scale_residual_with_a_long_name", "ok": True, "dtypes": ["float32"],
     "shapes": [[8192, 4096], [4096, 4096]], "description": "A GEMM, scaled, plus a residual. " * 8},
    {"name": "broken", "ok": False, "error": "cases/broken/manifest.yaml: inputs: missing"},
]


@pytest.mark.parametrize("width", [80, 120])
def test_names_are_never_cut_and_each_case_is_one_line(width: int) -> None:
    console = Console(width=width, record=True, color_system=None)
    console.print(cases_table(ROWS, width=width))
    text = console.export_text()
    lines = text.splitlines()
    assert all(len(line) <= width for line in lines)
    body = [line for line in lines if "matmul_scale_residual_with_a_long_name" in line]
    assert len(body) == 1 and "…" in body[0]  # the description is cut, the name is whole
    assert any("broken" in line for line in lines)
    assert ("[8192, 4096]" in text) == (width >= 120)  # the shapes go first when room is short

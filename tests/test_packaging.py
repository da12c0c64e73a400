"""The distribution: importable only under `kopt`, complete, and free of import cycles."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("harness", "phases", "workbench")


def test_every_package_folder_is_listed_in_pyproject() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"kopt." + ".".join(p.parent.relative_to(ROOT).parts)
             for part in PARTS for p in (ROOT / part).rglob("__init__.py")}
    assert found - listed == set(), "add these to [tool.setuptools] packages"


def test_the_wheel_puts_nothing_but_kopt_in_site_packages(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, cwd=tmp_path)
    [wheel] = tmp_path.glob("kopt-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"kopt"}
    for needed in ("kopt/harness/worker.py", "kopt/phases/schemas/envelope.json",
                   "kopt/workbench/kopt.tcss", "kopt/cases/softmax/manifest.yaml",
                   "kopt/cases/softmax/model.py", "kopt/__main__.py"):
        assert needed in names


def test_python_dash_m_kopt_is_the_kopt_command(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "kopt", "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "usage: kopt" in done.stdout
    # installed (the README's editable install), the folders are reachable only under kopt
    installed = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    bare = subprocess.run([sys.executable, "-c", "import kopt.harness.case; import harness"],
                          cwd=tmp_path, env=installed, capture_output=True, text=True, timeout=60)
    assert "No module named 'harness'" in bare.stderr


def _import_graph() -> dict[str, set[str]]:
    modules = {}
    for part in PARTS:
        for path in (ROOT / part).rglob("*.py"):
            name = "kopt." + ".".join(path.relative_to(ROOT).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in modules:
                graph[name].add(node.module)
            if isinstance(node, ast.ImportFrom) and node.module:
                graph[name].update(f"{node.module}.{a.name}" for a in node.names
                                   if f"{node.module}.{a.name}" in modules)
            elif isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in modules)
    return graph


def test_no_import_cycles() -> None:
    """Function-level imports count too: each layer reads top to bottom."""
    graph = _import_graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert cycles == []

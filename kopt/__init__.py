"""kopt: a terminal workbench that makes PyTorch models faster with fused, verified Triton kernels.

The distribution's parts keep the top-level folders of the design card (`harness/`, `phases/`,
`workbench/`) and are importable only as `kopt.harness`, `kopt.phases` and `kopt.workbench`,
so that nothing called `harness` lands in a user's site-packages. An installed wheel holds them
under `kopt/` (pyproject's package-dir); in a source checkout (an editable install, a worker
started with the checkout on PYTHONPATH, a tree pushed to an ssh target) they sit beside this
folder, and the package's search path reaches them there.
"""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

_SOURCE_ROOT = Path(__file__).resolve().parent.parent
if not (Path(__file__).resolve().parent / "harness").is_dir() and (
        _SOURCE_ROOT / "harness" / "__init__.py").is_file():
    __path__.append(str(_SOURCE_ROOT))  # noqa: F821 (a package's own search path)

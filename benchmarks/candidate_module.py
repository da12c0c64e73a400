"""A candidate's source imported as a module, for the benchmark scripts beside this one."""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path
from types import ModuleType


def import_source(source: str, name: str = "candidate", folder: Path | None = None) -> ModuleType:
    """`source` written to `folder/name.py` (a fresh temporary folder by default) and imported."""
    folder = folder or Path(tempfile.mkdtemp())
    file = folder / f"{name}.py"
    file.write_text(source)
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generated(case_path: str | Path, name: str = "candidate") -> ModuleType:
    """The offline engineer's candidate for the case at `case_path`, imported."""
    from kopt.harness.case import load_case
    from kopt.phases.engineers.offline import generate_candidate

    return import_source(generate_candidate(load_case(str(case_path))).source, name)

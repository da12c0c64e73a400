"""Shared fixtures: an isolated workspace so tests never write into the checkout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def has_gpu() -> bool:
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tensor cache for the whole session (data is deterministic, so sharing is safe)."""
    return tmp_path_factory.mktemp("kopt-cache")


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_cache: Path) -> Path:
    """An empty workspace (KOPT_HOME) whose writes land in tmp_path."""
    monkeypatch.setenv("KOPT_HOME", str(tmp_path))
    monkeypatch.setenv("KOPT_CACHE", str(shared_cache))
    monkeypatch.chdir(tmp_path)
    return tmp_path


os.environ.setdefault("TRITON_INTERPRET", "1" if not has_gpu() else os.environ.get("TRITON_INTERPRET", "0"))

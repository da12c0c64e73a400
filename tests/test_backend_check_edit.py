"""`Backend.check_edit` (the workbench's saved-edit check) and `Backend.bench`'s kept baselines,
with the verifier and the bench replaced by recorders: no worker runs here."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import kopt.harness.bench as bench
import kopt.harness.verify as verify
from kopt.workbench.backend import Backend


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    seen: dict[str, list[Any]] = {"verify": [], "bench": []}

    class Report:
        def __init__(self, path: Path) -> None:
            self.path = path

        def to_dict(self) -> dict[str, Any]:
            return {"candidate": str(self.path), "accepted": "BROKEN" not in self.path.read_text()}

    def fake_verify(case: Any, candidate: Any, **_: Any) -> Report:
        seen["verify"].append((Path(candidate), Path(candidate).read_text()))
        return Report(Path(candidate))

    def fake_bench(case: Any, candidates: Any, *, verified: Any = (), memo: Any = None,
                   **_: Any) -> list[dict[str, Any]]:
        kept = memo.get(("k",)) if memo is not None else None
        seen["bench"].append({"paths": list(candidates), "verified": list(verified),
                              "memo": memo, "kept": kept is not None})
        if memo is not None and kept is None:
            memo.put(("k",), SimpleNamespace(at=time.monotonic()))  # type: ignore[arg-type]
        return [{"variant": "eager", "median_ms": 1.0}]

    monkeypatch.setattr(verify, "verify_candidate", fake_verify)
    monkeypatch.setattr(bench, "bench_case", fake_bench)
    return seen


def test_a_saved_edit_is_verified_as_a_copy_then_timed_with_that_verdict(
        tmp_path: Path, calls: dict[str, list[Any]]) -> None:
    kernel = tmp_path / "kernels" / "k.py"
    kernel.parent.mkdir()
    kernel.write_text("GOOD 1")
    told: list[dict[str, Any]] = []
    report, rows = Backend().check_edit("case", kernel,
                                        on_verified=lambda r: told.append(r) or True)
    (copy, text), = calls["verify"]
    assert copy != kernel and copy.name == kernel.name and text == "GOOD 1"
    assert not copy.exists()  # the copy is gone once the check ends
    assert report["candidate"] == str(kernel) and told == [report]  # named for the user's file
    assert rows == [{"variant": "eager", "median_ms": 1.0}]
    assert calls["bench"][0]["paths"] == [copy] and calls["bench"][0]["verified"] == [copy]


def test_a_rejected_edit_or_a_dismissed_check_is_not_timed(
        tmp_path: Path, calls: dict[str, list[Any]]) -> None:
    kernel = tmp_path / "k.py"
    kernel.write_text("BROKEN")
    report, rows = Backend().check_edit("case", kernel)
    assert report["accepted"] is False and rows is None
    kernel.write_text("GOOD")
    report, rows = Backend().check_edit("case", kernel, on_verified=lambda r: False)
    assert report["accepted"] is True and rows is None  # the user moved on
    assert calls["bench"] == []


def test_saved_edits_reuse_the_baselines_and_an_explicit_bench_times_them_again(
        tmp_path: Path, calls: dict[str, list[Any]]) -> None:
    kernel = tmp_path / "k.py"
    kernel.write_text("GOOD")
    backend = Backend()
    backend.check_edit("case", kernel)
    backend.check_edit("case", kernel)
    first, second = calls["bench"]
    assert first["memo"] is second["memo"] and (first["kept"], second["kept"]) == (False, True)
    backend.bench("case", kernel)  # `b`: eager and torch.compile timed anew
    assert calls["bench"][2]["memo"] is first["memo"] and calls["bench"][2]["kept"] is False

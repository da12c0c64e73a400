"""The archive bundle: atomic (nothing half-written survives a failure), secrets redacted."""

from __future__ import annotations

from pathlib import Path

import pytest

from kopt.phases.archive import ArchiveContents, archive_name, redact_tree, write_archive


def _contents(tmp: Path, kernel: Path) -> ArchiveContents:
    run_dir = tmp / "manifests" / "r1"
    (run_dir / "transcripts").mkdir(parents=True)
    (run_dir / "transcripts" / "optimizer.jsonl").write_text('{"text": "hello"}\n')
    manifest = run_dir / "architect.json"
    manifest.write_text("{}")
    report = run_dir / "report.md"
    report.write_text("# report\n")
    return ArchiveContents(case="lg", run_id="r1", speedup=1.4242, kernel=kernel,
                           manifests=[manifest], report=report, chart=None, run_dir=run_dir,
                           reproduce="kopt verify lg lg.py\n")


def test_archive_is_complete_and_named_by_speedup(workspace: Path) -> None:
    kernel = workspace / "k.py"
    kernel.write_text("x = 1\n")
    out = write_archive(_contents(workspace, kernel), workspace / "archive")
    assert out.name.endswith("-lg-1.42x")
    assert sorted(p.name for p in out.iterdir()) == [
        "MANIFEST.txt", "REPRODUCE.md", "lg.py", "manifests", "report.md", "transcripts"]
    assert "secret scan: clean" in (out / "MANIFEST.txt").read_text()
    assert archive_name("lg", 0.0004).endswith("-lg-0.0004x")


def test_a_failed_archive_leaves_nothing_behind(workspace: Path) -> None:
    missing = workspace / "no-such-kernel.py"
    with pytest.raises(FileNotFoundError):
        write_archive(_contents(workspace, missing), workspace / "archive")
    assert list((workspace / "archive").iterdir()) == []


def test_redaction_of_the_key_value_and_sk_ant_tokens(workspace: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "my-secret-key-123456")
    (workspace / "a.json").write_text('{"key": "my-secret-key-123456"}')
    (workspace / "b.md").write_text("token sk-ant-api03-abcdefghijkl here")
    (workspace / "c.txt").write_text("nothing")
    assert redact_tree(workspace) == ["a.json", "b.md"]
    assert "my-secret" not in (workspace / "a.json").read_text()
    assert (workspace / "b.md").read_text() == "token [redacted] here"

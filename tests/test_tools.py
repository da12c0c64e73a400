"""The engineer's five tools: confined to the worktree, errors the model can read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kopt.harness.errors import WorkerError
from kopt.phases.engineers.base import Toolbox, VerifyResult
from kopt.phases.engineers.tools import TOOL_NAMES, TOOL_SPECS, WorktreeTools, format_profile


class StubToolbox:
    def __init__(self, verdict: bool = True, fail: Exception | None = None) -> None:
        self.verified: list[str] = []
        self.verdict = verdict
        self.fail = fail

    def verify(self, rel: str) -> VerifyResult:
        if self.fail:
            raise self.fail
        self.verified.append(rel)
        return VerifyResult(self.verdict, "loads: ok\ncorrect: FAILED 3 of 16 elements differ",
                            {}, commit="abcdef1234567890",
                            metrics={"median_ms": 0.1234, "speedup": 2.5, "pct_of_floor": 61.0})

    def profile(self, rel: str) -> dict[str, Any]:
        return {"latency_ms": {"median": 0.25}, "roofline": {"pct_of_floor": 48.0,
                                                             "floor_ms": 0.12, "bound": "memory"},
                "speedup": 3.0, "timing_label": "cuda-events",
                "top_kernels": [{"name": "_ln_gelu_kernel", "time_ms": 0.2, "pct": 80.0}]}


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    root = tmp_path / "wt"
    (root / "case").mkdir(parents=True)
    (root / "case" / "model.py").write_text("class Model: pass\n")
    (root / ".git").write_text("gitdir: elsewhere\n")
    (tmp_path / "secret.txt").write_text("outside")
    return root


def tools_for(worktree: Path, stub: StubToolbox | None = None) -> WorktreeTools:
    stub = stub or StubToolbox()
    return WorktreeTools(worktree, Toolbox(verify=stub.verify, profile=stub.profile))


def test_tool_names_and_arguments_are_the_designs():
    assert TOOL_NAMES == ("read_file", "write_file", "list_directory", "verification_tool",
                          "profiler_tool")
    args = {s["name"]: list(s["input_schema"]["properties"]) for s in TOOL_SPECS}
    assert args == {"read_file": ["file_path"], "write_file": ["file_path", "content"],
                    "list_directory": ["path", "recursive"],
                    "verification_tool": ["candidate_path"], "profiler_tool": ["candidate_path"]}


@pytest.mark.parametrize("path, reason", [
    ("../secret.txt", "'..'"),
    ("case/../../secret.txt", "'..'"),
    ("/etc/passwd", "absolute"),
    ("~/.ssh/id_rsa", "absolute"),
    ("C:/Windows/win.ini", "absolute"),
    (".git/config", ".git"),
    ("", "non-empty"),
])
def test_paths_leaving_the_worktree_are_refused_as_tool_errors(worktree, path, reason):
    for name, args in (("read_file", {"file_path": path}),
                       ("write_file", {"file_path": path, "content": "x"}),
                       ("list_directory", {"path": path})):
        outcome = tools_for(worktree).run(name, args)
        assert outcome.is_error and "refused" in outcome.text and reason in outcome.text, name
    assert (worktree.parent / "secret.txt").read_text() == "outside"


def test_symlinks_leading_out_are_refused_but_inner_ones_work(worktree):
    (worktree / "out").symlink_to(worktree.parent, target_is_directory=True)
    (worktree / "inner").symlink_to(worktree / "case", target_is_directory=True)
    tools = tools_for(worktree)
    refused = tools.run("read_file", {"file_path": "out/secret.txt"})
    assert refused.is_error and "symlink" in refused.text
    assert tools.run("write_file", {"file_path": "out/new.txt", "content": "x"}).is_error
    assert not (worktree.parent / "new.txt").exists()
    inner = tools.run("read_file", {"file_path": "inner/model.py"})
    assert not inner.is_error and inner.text == "class Model: pass\n"


def test_write_file_syntax_checks_python_and_creates_folders(worktree):
    tools = tools_for(worktree)
    bad = tools.run("write_file", {"file_path": "kernels/k.py", "content": "def f(:\n  pass\n"})
    assert bad.is_error and "SyntaxError" in bad.text and "line 1" in bad.text
    assert not (worktree / "kernels").exists()
    good = tools.run("write_file", {"file_path": "kernels/k.py", "content": "X = 1\n"})
    assert not good.is_error and good.path == "kernels/k.py" and "1 lines" in good.text
    assert (worktree / "kernels/k.py").read_text() == "X = 1\n"
    notes = tools.run("write_file", {"file_path": "notes.md", "content": "def f(:"})
    assert not notes.is_error  # only Python is parsed


def test_malformed_input_is_a_readable_error(worktree):
    tools = tools_for(worktree)
    cases = [
        ("read_file", {}, "missing argument(s) file_path"),
        ("read_file", {"file_path": "a", "mode": "w"}, "unknown argument(s) mode"),
        ("read_file", {"file_path": 3}, "file_path must be a string"),
        ("list_directory", {"recursive": "yes"}, "recursive must be a boolean"),
        ("read_file", "case/model.py", "input must be a JSON object"),
        ("run_shell", {"cmd": "ls"}, "unknown tool 'run_shell'"),
    ]
    for name, args, message in cases:
        outcome = tools.run(name, args)
        assert outcome.is_error and message in outcome.text, (name, outcome.text)


def test_list_directory_hides_git_and_recurses(worktree):
    tools = tools_for(worktree)
    (worktree / "kernels").mkdir()
    (worktree / "kernels" / "k.py").write_text("")
    top = tools.run("list_directory", {})
    assert top.text.splitlines() == ["case/", "kernels/"]
    deep = tools.run("list_directory", {"path": ".", "recursive": True})
    assert "kernels/k.py" in deep.text.splitlines() and ".git" not in deep.text
    assert tools.run("list_directory", {"path": "nope"}).is_error


def test_verification_tool_reports_verdict_commit_and_metrics(worktree):
    stub = StubToolbox(verdict=False)
    tools = tools_for(worktree, stub)
    missing = tools.run("verification_tool", {"candidate_path": "kernels/k.py"})
    assert missing.is_error and "write the candidate first" in missing.text
    (worktree / "kernels").mkdir()
    (worktree / "kernels" / "k.py").write_text("X = 1\n")
    outcome = tools.run("verification_tool", {"candidate_path": "./kernels/k.py"})
    assert stub.verified == ["kernels/k.py"]
    assert outcome.text.splitlines()[0] == "REJECTED: kernels/k.py (commit abcdef1234)"
    assert "correct: FAILED 3 of 16 elements differ" in outcome.text
    assert "2.50x vs eager" in outcome.text and outcome.verify is not None


def test_a_failing_verifier_is_a_tool_error_not_a_crash(worktree):
    (worktree / "k.py").write_text("X = 1\n")
    stub = StubToolbox(fail=WorkerError("worker died (exit -9)", fix="see the job log"))
    outcome = tools_for(worktree, stub).run("verification_tool", {"candidate_path": "k.py"})
    assert outcome.is_error and "worker died (exit -9)" in outcome.text


def test_profiler_tool_formats_timing_floor_and_top_kernels(worktree):
    (worktree / "k.py").write_text("X = 1\n")
    text = tools_for(worktree).run("profiler_tool", {"candidate_path": "k.py"}).text
    assert "median: 0.2500 ms" in text and "48.0% of floor" in text
    assert "memory-bound" in text and "_ln_gelu_kernel: 0.2000 ms (80.0%)" in text
    assert format_profile({"something": 1}).startswith("{")

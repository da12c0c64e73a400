"""Git history of runs against temporary repositories: branches, trailers, decisions, diff,
and the user's checkout left byte-for-byte as it was."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from test_pipeline_fakes import fakes

from kopt.harness.errors import BadInputError, GitError
from kopt.phases import history
from kopt.phases.pipeline import run_pipeline


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout


def snapshot(root: Path) -> dict[str, str]:
    """Every byte the user could notice: tracked and untracked files (outside kopt's
    folders), the index, HEAD, the current branch and its commit."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and not rel.startswith((".kopt/", "manifests/", "archive/", ".git/")):
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    git_dir = root / ".git"
    for name in ("index", "HEAD"):
        f = git_dir / name
        out[f".git/{name}"] = hashlib.sha256(f.read_bytes()).hexdigest() if f.exists() else "-"
    out["branch"] = git(root, "symbolic-ref", "HEAD").strip()
    out["head"] = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", "-q", "HEAD"],
                                 capture_output=True, text=True).stdout.strip()
    out["status"] = git(root, "status", "--porcelain=v1", "--untracked-files=all")
    return out


@pytest.fixture
def user_repo(workspace: Path) -> Path:
    """A user's repository: commits on `main`, a staged change, an unstaged edit, an untracked file."""
    git(workspace, "init", "-q", "-b", "main")
    git(workspace, "config", "user.email", "u@example.com")
    git(workspace, "config", "user.name", "User")
    (workspace / "train.py").write_text("print('train')\n")
    (workspace / "notes.md").write_text("notes\n")
    git(workspace, "add", ".")
    git(workspace, "commit", "-q", "-m", "user's work")
    (workspace / "train.py").write_text("print('train v2')\n")
    git(workspace, "add", "train.py")
    (workspace / "notes.md").write_text("notes, unsaved edit\n")
    (workspace / "scratch.txt").write_text("untracked\n")
    return workspace


def test_a_run_leaves_the_users_checkout_byte_for_byte(user_repo: Path) -> None:
    before = snapshot(user_repo)
    result = run_pipeline("layernorm_gelu", iterations=2, fakes=fakes())
    assert snapshot(user_repo) == before
    assert result.verified and len(result.manifests) == 4
    # the run branch grew from the user's commit and holds only kopt's files on top of it
    assert git(user_repo, "merge-base", "main", result.branch).strip() == before["head"]
    files = git(user_repo, "diff", "--name-only", "main", result.branch).split()
    assert set(files) == {"case/manifest.yaml", "case/model.py", "plan.json",
                          "kernels/layernorm_gelu.py", "kernels/layernorm_gelu.verification.json",
                          "kernels/layernorm_gelu.metrics.json"}


def test_a_repository_without_commits_gets_an_orphan_base(workspace: Path) -> None:
    git(workspace, "init", "-q", "-b", "main")
    before = snapshot(workspace)
    branch, wt = history.create_run_branch("lg", "r1")
    assert snapshot(workspace) == before
    assert branch == "kopt/lg/r1" and (wt / ".git").is_file()
    assert git(workspace, "log", "--format=%s", branch).strip() == \
        "kopt: empty base of run branches"


def test_not_a_repository_says_kopt_init(workspace: Path) -> None:
    with pytest.raises(GitError, match="kopt init"):
        history.list_runs()
    root, created = history.init_workspace()
    assert created and (workspace / ".git").is_dir()
    assert (workspace / ".gitignore").read_text().split() == [".kopt/", "manifests/", "archive/"]
    assert history.list_runs() == []


def _two_iterations(root: Path) -> Path:
    history.init_workspace(root)
    _, wt = history.create_run_branch("lg", "r1")
    (wt / "kernels").mkdir()
    for n, (body, speedup, ok) in enumerate([("x = 1\n", None, False), ("x = 2\n", 1.42, True)], 1):
        (wt / "kernels" / "lg.py").write_text(body)
        history.commit_iteration(
            wt, run_id="r1", phase="optimizer", iteration=n, case="lg",
            subject=f"optimizer: lg iter {n} - " + ("1.42x vs eager, verified" if ok else "rejected"),
            body="0.121 ms vs 0.172 ms eager", speedup=speedup, pct_of_floor=80.0 if ok else None,
            verified=ok, author="anthropic", candidate="kernels/lg.py")
    return wt


def test_iteration_commits_carry_trailers_read_back_by_list_runs(workspace: Path) -> None:
    wt = _two_iterations(workspace)
    msg = git(wt, "log", "-1", "--format=%B")
    for trailer in ("Kopt-Run: r1", "Kopt-Phase: optimizer", "Kopt-Iteration: 2",
                    "Kopt-Speedup: 1.420", "Kopt-Verified: true", "Kopt-Author: anthropic"):
        assert trailer in msg
    [run] = history.list_runs("lg")
    assert [(i.iteration, i.verified, i.speedup) for i in run.iterations] == \
        [(1, False, None), (2, True, 1.42)]
    assert run.best_speedup == 1.42 and run.approval["state"] == "pending"
    assert run.iterations[1].author == "anthropic" and run.iterations[1].pct_of_floor == 80.0
    assert history.list_runs("other") == []


def test_approve_reject_undo_are_commits_on_the_run_branch(workspace: Path) -> None:
    _two_iterations(workspace)
    sha = history.approve("r1")
    run = history.get_run("r1")
    assert run.approval["state"] == "approved" and run.approval["decision_commit"] == sha
    assert run.approval["commit"] == run.iterations[1].commit
    history.reject("r1", "1", reason="too many registers\non H100")
    run = history.get_run("r1")
    assert run.approval == {"state": "rejected", "commit": run.iterations[0].commit,
                            "reason": "too many registers on H100",
                            "decision_commit": run.approval["decision_commit"]}
    assert "Kopt-Decision: rejected" in git(workspace, "log", "-1", "--format=%B", run.branch)
    history.undo_decision("r1")
    assert history.get_run("r1").approval["state"] == "pending"
    with pytest.raises(BadInputError, match="reason"):
        history.reject("r1", reason=" ")
    with pytest.raises(BadInputError, match="no iteration 7"):
        history.approve("r1", "7")
    # the worktree follows its branch (clean, at the decision commit)
    wt = history.worktree_path("r1")
    assert git(wt, "status", "--porcelain").strip() == ""


def test_diff_between_iterations(workspace: Path) -> None:
    _two_iterations(workspace)
    text = history.diff("r1")
    assert "-x = 1" in text and "+x = 2" in text
    first = history.diff("r1", None, "1")
    assert "+x = 1" in first and "-x" not in first
    with pytest.raises(BadInputError, match="no run"):
        history.diff("nope")
    # `kopt diff RUN A`: iteration A against the one before it (was empty: A against the best)
    assert "+x = 1" in history.diff("r1", "1")
    assert "-x = 1" in history.diff("r1", "2") and "+x = 2" in history.diff("r1", "2")


def test_kopt_diff_pages_whole_lines_on_a_terminal(workspace: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    from kopt.workbench.cli import main

    wt = _two_iterations(workspace)
    long = "y = " + " + ".join(f"value_{i}" for i in range(60)) + "\n"
    (wt / "kernels" / "lg.py").write_text(long)
    history.commit_iteration(wt, run_id="r1", phase="optimizer", iteration=3, case="lg",
                             subject="optimizer: lg iter 3 - rejected", body="", speedup=None,
                             pct_of_floor=None, verified=False, author="offline",
                             candidate="kernels/lg.py")
    assert main(["diff", "r1", "3", "--no-pager"]) == 0
    assert "+" + long.strip() in capsys.readouterr().out  # not cut at the terminal's width
    paged = workspace / "paged.txt"
    monkeypatch.setenv("KOPT_PAGER", f"sh -c 'cat > {paged}'")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main(["diff", "r1", "3"]) == 0
    text = paged.read_text()
    assert "\x1b[32m+" + long.strip() + "\x1b[0m" in text and capsys.readouterr().out == ""


def test_a_removed_worktree_is_recreated_and_a_dirty_one_reset(workspace: Path) -> None:
    wt = _two_iterations(workspace)
    (wt / "kernels" / "lg.py").write_text("half-written")
    (wt / "junk.py").write_text("junk")
    history.ensure_worktree("lg", "r1")  # the user's edits in a live worktree are kept
    assert (wt / "kernels" / "lg.py").read_text() == "half-written"
    history.ensure_worktree("lg", "r1", discard_changes=True)
    assert (wt / "kernels" / "lg.py").read_text() == "x = 2\n" and not (wt / "junk.py").exists()
    history.remove_worktree("r1")
    assert not wt.exists()
    assert history.get_run("r1").worktree is None and len(history.get_run("r1").iterations) == 2
    history.ensure_worktree("lg", "r1")
    assert (wt / "kernels" / "lg.py").read_text() == "x = 2\n"

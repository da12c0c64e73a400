"""Git history of runs: run branches in worktrees, iteration commits with trailers, decisions.

Each run works on branch `kopt/<case>/<run-id>` checked out in `.kopt/worktrees/<run-id>`
(`git worktree add`). The user's index, HEAD, current branch and working files are never
touched: commits are made inside the run's worktree, decisions are empty commits made with
plumbing (`commit-tree` + `update-ref`) on the run branch, and the only file kopt writes in
the user's git dir is `info/exclude` (untracked) so that `.kopt/`, `manifests/` and
`archive/` never show up in `git status`.

A decision is mirrored into the run's integrator manifest (`details.approval`) when the run
has one. Everything `list_runs` reports is read back from git alone (branch names and commit
trailers), so the history survives a deleted `manifests/` folder. GitPython is not
thread-safe: every function opens its own `Repo` and closes it.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import git

from kopt.harness.errors import BadInputError, GitError, RegressionError
from kopt.harness.paths import workspace_root
from kopt.harness.speedup import Speedup, format_speedup, speed_measured

BRANCH_PREFIX = "kopt/"
IGNORED = (".kopt/", "manifests/", "archive/")
# Author of kopt's commits; the real author of an iteration is its Kopt-Author trailer.
KOPT_IDENTITY = {"GIT_AUTHOR_NAME": "kopt", "GIT_AUTHOR_EMAIL": "kopt@localhost",
                 "GIT_COMMITTER_NAME": "kopt", "GIT_COMMITTER_EMAIL": "kopt@localhost"}
TRAILER_RE = re.compile(r"^(Kopt-[A-Za-z-]+):\s*(.*)$", re.MULTILINE)
DECISIONS = ("approved", "rejected", "undone")


@dataclass
class IterationInfo:
    """One iteration commit on a run branch, as read back from its trailers."""

    commit: str
    iteration: int
    phase: str
    author: str
    """offline | anthropic | replay | user"""
    speedup: float | None
    pct_of_floor: float | None
    verified: bool
    message: str
    """The subject line."""
    candidate: str
    """Path of the kernel in the worktree (`kernels/<case>.py`)."""
    timing_label: str | None = None
    """`cuda-events` or `cpu-interpreter` (the `Kopt-Timing` trailer; None in older runs).
    `speedup` carries it too (`harness.speedup.Speedup`), so an interpreter figure is never
    written as a speedup."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunInfo:
    """A run: its branch, worktree, iterations (oldest first), best speedup and approval."""

    run_id: str
    case: str
    branch: str
    worktree: str | None
    """Path of the worktree, or None once it was removed."""
    iterations: list[IterationInfo] = field(default_factory=list)
    best_speedup: float | None = None
    approval: dict[str, Any] = field(default_factory=lambda: {"state": "pending"})
    """{"state": pending|approved|rejected, "commit", "reason", "decision_commit"}"""
    created: float = 0.0
    """Commit time of the run's first commit (seconds since the epoch)."""

    def best(self) -> IterationInfo | None:
        ok = [i for i in self.iterations if i.verified and i.speedup is not None]
        return max(ok, key=lambda i: i.speedup or 0.0) if ok else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        best = self.best()
        d["best_commit"] = best.commit if best else None
        return d


# -- repository ----------------------------------------------------------------------------------

@contextmanager
def open_repo(path: Path | None = None) -> Iterator[git.Repo]:
    """The workspace's repository (searching parents), closed afterwards."""
    root = Path(path or workspace_root())
    try:
        repo = git.Repo(root, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise GitError(f"{root} is not inside a git repository",
                       fix="run `kopt init` to create one (kopt records every iteration in git)"
                       ) from None
    try:
        yield repo
    finally:
        repo.close()


def init_workspace(root: Path | None = None) -> tuple[Path, bool]:
    """`kopt init`: make `root` a git repository if it is not one, with a .gitignore that
    ignores kopt's folders when it creates one. Returns (repo root, created)."""
    root = Path(root or workspace_root()).resolve()
    try:
        with open_repo(root) as repo:
            top = Path(repo.working_tree_dir or root)
            created = False
    except GitError:
        repo = git.Repo.init(root)
        repo.close()
        top, created = root, True
        gitignore = root / ".gitignore"
        if not gitignore.exists():
            gitignore.write_text("".join(f"{p}\n" for p in IGNORED))
    exclude_kopt_paths(top)
    return top, created


def exclude_kopt_paths(root: Path | None = None) -> None:
    """List kopt's folders in `.git/info/exclude` (untracked, never the user's .gitignore)."""
    with open_repo(root) as repo:
        common = Path(repo.common_dir)
    exclude = common / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    text = exclude.read_text() if exclude.exists() else ""
    lines = set(text.splitlines())
    missing = [f"/{p}" for p in IGNORED if f"/{p}" not in lines]
    if missing:
        sep = "" if not text or text.endswith("\n") else "\n"
        exclude.write_text(text + sep + "# kopt's run folders\n" + "".join(f"{m}\n" for m in missing))


def repo_root(root: Path | None = None) -> Path:
    with open_repo(root) as repo:
        return Path(repo.working_tree_dir or ".").resolve()


def branch_name(case: str, run_id: str) -> str:
    return f"{BRANCH_PREFIX}{case}/{run_id}"


def worktree_path(run_id: str, root: Path | None = None) -> Path:
    return Path(root or workspace_root()).resolve() / ".kopt" / "worktrees" / run_id


def _empty_base(repo: git.Repo) -> str:
    """An empty root commit made with plumbing (HEAD, index and refs stay as they are)."""
    tree = repo.git.mktree()  # stdin is /dev/null: the empty tree
    with repo.git.custom_environment(**KOPT_IDENTITY):
        return repo.git.commit_tree(tree, "-m", "kopt: empty base of run branches")


def create_run_branch(case: str, run_id: str, root: Path | None = None) -> tuple[str, Path]:
    """Branch `kopt/<case>/<run-id>` in worktree `.kopt/worktrees/<run-id>`, based on the
    user's HEAD commit (or an empty commit when the repository has none yet)."""
    exclude_kopt_paths(root)
    branch = branch_name(case, run_id)
    path = worktree_path(run_id, root)
    with open_repo(root) as repo:
        if any(h.name == branch for h in repo.heads):
            raise GitError(f"branch {branch!r} already exists", fix="pick another run id")
        try:
            base = repo.head.commit.hexsha
        except ValueError:  # unborn HEAD: no commit yet
            base = _empty_base(repo)
        path.parent.mkdir(parents=True, exist_ok=True)
        repo.git.worktree("add", "--quiet", "-b", branch, str(path), base)
    return branch, path


def ensure_worktree(case: str, run_id: str, root: Path | None = None, *,
                    discard_changes: bool = False) -> Path:
    """The run's worktree, re-created from its branch if it was removed. With
    `discard_changes` (the pipeline resuming a run) a half-written state left by a killed
    process -- a stale index lock, uncommitted or untracked files -- is discarded."""
    branch = branch_name(case, run_id)
    path = worktree_path(run_id, root)
    with open_repo(root) as repo:
        if not any(h.name == branch for h in repo.heads):
            raise GitError(f"run branch {branch!r} does not exist",
                           fix="check the run id with `kopt history`")
        if not (path / ".git").exists():
            repo.git.worktree("prune")
            repo.git.worktree("add", "--quiet", str(path), branch)
            return path
    if not discard_changes:
        return path
    with open_repo(path) as wt:
        lock = Path(wt.git_dir) / "index.lock"
        if lock.exists() and time.time() - lock.stat().st_mtime > 2:
            lock.unlink()
        wt.git.reset("--hard", "--quiet")
        wt.git.clean("-fdq")
    return path


def remove_worktree(run_id: str, root: Path | None = None) -> None:
    """Remove a run's worktree (its branch and commits stay)."""
    path = worktree_path(run_id, root)
    with open_repo(root) as repo:
        if path.exists():
            repo.git.worktree("remove", "--force", str(path))
        repo.git.worktree("prune")


# -- commits -------------------------------------------------------------------------------------

def format_trailers(trailers: dict[str, Any]) -> str:
    return "\n".join(f"Kopt-{k}: {v}" for k, v in trailers.items() if v is not None)


def parse_trailers(message: str) -> dict[str, str]:
    return {k: v.strip() for k, v in TRAILER_RE.findall(message)}


def commit_iteration(worktree: Path, *, run_id: str, phase: str, iteration: int | None,
                     subject: str, body: str = "", speedup: float | None = None,
                     pct_of_floor: float | None = None, verified: bool | None = None,
                     author: str = "offline", candidate: str | None = None,
                     case: str | None = None, paths: list[str] | None = None,
                     extra: dict[str, Any] | None = None,
                     timing_label: str | None = None) -> str:
    """Stage `paths` (default: everything) in the run's worktree and commit them with kopt's
    trailers. Returns the new commit's sha (an empty commit when nothing changed)."""
    trailers: dict[str, Any] = {
        "Run": run_id, "Case": case, "Phase": phase, "Iteration": iteration,
        "Speedup": None if speedup is None else (f"{speedup:.3f}" if speedup >= 0.1
                                                  else f"{speedup:.3g}"),
        "Timing": timing_label if speedup is not None else None,
        "Pct-Of-Floor": None if pct_of_floor is None else f"{pct_of_floor:.1f}",
        "Verified": None if verified is None else ("true" if verified else "false"),
        "Author": author, "Candidate": candidate, **(extra or {}),
    }
    message = subject.strip() + "\n\n" + (body.strip() + "\n\n" if body.strip() else "")
    message += format_trailers(trailers) + "\n"
    with open_repo(worktree) as repo:
        repo.git.add("--all", "--", *(paths or ["."]))
        with repo.git.custom_environment(**KOPT_IDENTITY):
            repo.git.commit("--quiet", "--allow-empty", "--no-verify", "--cleanup=verbatim",
                            "-m", message)
        return repo.head.commit.hexsha


def _find_branch(repo: git.Repo, run_id: str) -> str:
    for h in repo.heads:
        if h.name.startswith(BRANCH_PREFIX) and h.name.rsplit("/", 1)[-1] == run_id:
            return h.name
    raise BadInputError(f"no run {run_id!r} in this repository",
                        fix="list runs with `kopt history`")


def _run_commits(repo: git.Repo, branch: str, run_id: str) -> list[tuple[str, float, str]]:
    """(sha, time, message) of the run's own commits, oldest first."""
    out = []
    for c in repo.iter_commits(branch):
        msg = str(c.message)
        if parse_trailers(msg).get("Kopt-Run") != run_id:
            break
        out.append((c.hexsha, float(c.committed_date), msg))
    return out[::-1]


def _float(v: str | None) -> float | None:
    try:
        return float(v) if v not in (None, "") else None
    except ValueError:
        return None


def _read_run(repo: git.Repo, branch: str, root: Path) -> RunInfo:
    run_id = branch.rsplit("/", 1)[-1]
    case = branch[len(BRANCH_PREFIX):].rsplit("/", 1)[0]
    wt = worktree_path(run_id, root)
    info = RunInfo(run_id, case, branch, str(wt) if (wt / ".git").exists() else None)
    commits = _run_commits(repo, branch, run_id)
    if commits:
        info.created = commits[0][1]
    for sha, _t, msg in commits:
        t = parse_trailers(msg)
        decision = t.get("Kopt-Decision")
        if decision:
            if decision == "undone":
                info.approval = {"state": "pending", "commit": None, "reason": None,
                                 "decision_commit": sha}
            else:
                info.approval = {"state": decision, "commit": t.get("Kopt-Target"),
                                 "reason": t.get("Kopt-Reason"), "decision_commit": sha}
            continue
        if t.get("Kopt-Iteration") is None:
            continue
        label = t.get("Kopt-Timing") or None
        speedup = _float(t.get("Kopt-Speedup"))
        info.iterations.append(IterationInfo(
            commit=sha, iteration=int(t["Kopt-Iteration"]), phase=t.get("Kopt-Phase", ""),
            author=t.get("Kopt-Author", ""),
            speedup=None if speedup is None else Speedup(speedup, label),
            pct_of_floor=_float(t.get("Kopt-Pct-Of-Floor")),
            verified=t.get("Kopt-Verified") == "true", message=msg.splitlines()[0],
            candidate=t.get("Kopt-Candidate", f"kernels/{case}.py"), timing_label=label))
    best = info.best()
    info.best_speedup = best.speedup if best else None
    return info


def list_runs(case: str | None = None, root: Path | None = None) -> list[RunInfo]:
    """Every run in the repository (oldest first), read from branches and trailers alone."""
    with open_repo(root) as repo:
        top = Path(repo.working_tree_dir or ".").resolve()
        base = Path(root or workspace_root()).resolve()
        runs = [_read_run(repo, h.name, base) for h in repo.heads
                if h.name.startswith(BRANCH_PREFIX)]
    _ = top
    runs = [r for r in runs if case is None or r.case == case]
    return sorted(runs, key=lambda r: (r.created, r.run_id))


def get_run(run_id: str, root: Path | None = None) -> RunInfo:
    with open_repo(root) as repo:
        branch = _find_branch(repo, run_id)
        return _read_run(repo, branch, Path(root or workspace_root()).resolve())


def _resolve_commit(repo: git.Repo, run: RunInfo, ref: str | None) -> str:
    """An iteration number, a commit (prefix), or None (the best verified iteration)."""
    if ref is None:
        best = run.best()
        if best is None:
            raise BadInputError(f"run {run.run_id!r} has no verified iteration",
                                fix="name a commit explicitly")
        return best.commit
    if ref.isdigit() and len(ref) < 7:
        for it in run.iterations:
            if it.iteration == int(ref):
                return it.commit
        raise BadInputError(f"run {run.run_id!r} has no iteration {ref}",
                            fix=f"expected one of {[i.iteration for i in run.iterations]}")
    try:
        sha = repo.commit(ref).hexsha
    except (git.BadName, ValueError):
        raise BadInputError(f"no commit {ref!r}", fix="give an iteration number or a commit") from None
    if sha not in {i.commit for i in run.iterations}:
        raise BadInputError(f"commit {ref!r} is not an iteration of run {run.run_id!r}",
                            fix="see `kopt history` for the run's commits")
    return sha


def _decide(run_id: str, decision: str, ref: str | None, reason: str | None,
            root: Path | None) -> str:
    run = get_run(run_id, root)
    with open_repo(root) as repo:
        target = None if decision == "undone" else _resolve_commit(repo, run, ref)
        tip = repo.commit(run.branch)
        subject = {"approved": f"approve: {run.case} {target[:10] if target else ''}",
                   "rejected": f"reject: {run.case} {target[:10] if target else ''}",
                   "undone": f"undo decision: {run.case}"}[decision]
        trailers = {"Run": run_id, "Case": run.case, "Phase": "decision",
                    "Decision": decision, "Target": target,
                    "Reason": " ".join((reason or "").split()) or None}
        message = f"{subject}\n\n{(reason or '').strip()}\n\n{format_trailers(trailers)}\n"
        with repo.git.custom_environment(**KOPT_IDENTITY):
            sha = repo.git.commit_tree(f"{tip.hexsha}^{{tree}}", "-p", tip.hexsha, "-m", message)
        repo.git.update_ref(f"refs/heads/{run.branch}", sha, tip.hexsha)
    wt = worktree_path(run_id, root)
    if (wt / ".git").exists():
        with open_repo(wt) as w:
            w.git.reset("--quiet", "--soft", sha)  # same tree: the worktree follows its branch
    _record_in_manifest(run_id, root, sha)
    return sha


def _record_in_manifest(run_id: str, root: Path | None, decision_commit: str) -> None:
    """Mirror the decision (as git now reads it) into the run's integrator manifest."""
    from kopt.phases.manifest import record_decision

    run_dir = Path(root or workspace_root()).resolve() / "manifests" / run_id
    if not (run_dir / "integrator.json").is_file():
        return  # a run stopped before the integrator: git alone records the decision
    approval = get_run(run_id, root).approval
    record_decision(run_dir, state=approval["state"], commit=approval.get("commit"),
                    reason=approval.get("reason"), decision_commit=decision_commit)


def approve(run_id: str, commit: str | None = None, *, root: Path | None = None,
            force: bool = False) -> str:
    """Record approval of `commit` (default: the best verified iteration); the decision commit.
    A kernel measured slower than eager (on a GPU) is refused unless `force`."""
    if not force:
        slower = slower_than_eager(run_id, commit, root=root)
        if slower is not None:
            raise RegressionError(
                f"run {run_id!r}: the kernel runs at {format_speedup(slower)} vs eager, slower "
                "than PyTorch", fix="keep PyTorch, or pass --force to approve it anyway")
    return _decide(run_id, "approved", commit, None, root)


def slower_than_eager(run_id: str, commit: str | None = None, *,
                      root: Path | None = None) -> float | None:
    """The speedup of `commit` (default: the best verified iteration) when it was measured on a
    GPU below 1.0x eager, else None. The integrator's final side-by-side timing counts for the
    commit it timed; any other iteration's own timing (its `Kopt-Speedup`) for the rest."""
    run = get_run(run_id, root)
    with open_repo(root) as repo:
        target = _resolve_commit(repo, run, commit)
    speedup: float | None = None
    label: str | None = None
    final = Path(root or workspace_root()).resolve() / "manifests" / run_id / "integrator.json"
    if final.is_file():
        from kopt.phases.manifest import read_manifest

        m = read_manifest(final)
        if m.details.get("approval", {}).get("commit") == target:
            speedup = m.details["timing"].get("speedup_vs_eager")
            label = m.details["timing"].get("timing_label")
    if speedup is None:
        it = next((i for i in run.iterations if i.commit == target), None)
        speedup, label = (it.speedup, it.timing_label) if it else (None, None)
    if speedup is None or not speed_measured(label or getattr(speedup, "timing_label", None)):
        return None
    return Speedup(speedup, label) if speedup < 1.0 else None


def reject(run_id: str, commit: str | None = None, *, reason: str,
           root: Path | None = None) -> str:
    """Record rejection with the user's reason (fed to the next run's engineer)."""
    if not reason or not reason.strip():
        raise BadInputError("a rejection needs a reason", fix="pass --reason TEXT")
    return _decide(run_id, "rejected", commit, reason, root)


def undo_decision(run_id: str, *, root: Path | None = None) -> str:
    """Back to pending (recorded as its own commit; history keeps the earlier decision)."""
    return _decide(run_id, "undone", None, None, root)


def diff(run_id: str, a: str | None = None, b: str | None = None, *,
         root: Path | None = None) -> str:
    """The kernel diff between two iterations (numbers or commits). Default: the best
    iteration (`b`) against the iteration before it (`a`), or against an empty file; `a`
    alone: that iteration against the one before it."""
    run = get_run(run_id, root)
    if not run.iterations:
        raise BadInputError(f"run {run_id!r} has no iterations yet", fix="wait for the optimizer")
    with open_repo(root) as repo:
        if b is None and a is not None:  # `kopt diff RUN A`: iteration A and what it changed
            a, b = None, a
        if b is None:
            best = run.best()
            b_sha = (best or run.iterations[-1]).commit
        else:
            b_sha = _resolve_commit(repo, run, b)
        if a is None:
            order = [i.commit for i in run.iterations]
            idx = order.index(b_sha)
            a_sha = order[idx - 1] if idx > 0 else None
        else:
            a_sha = _resolve_commit(repo, run, a)
        kernel = f"kernels/{run.case}.py"
        if a_sha is None:
            return repo.git.diff("--no-color", f"{b_sha}~1", b_sha, "--", kernel)
        return repo.git.diff("--no-color", a_sha, b_sha, "--", kernel)


def tip_commit(worktree: Path) -> str:
    """The commit checked out in a run's worktree (its branch tip)."""
    with open_repo(worktree) as repo:
        return repo.head.commit.hexsha


def show_file(commit: str, path: str, root: Path | None = None) -> str:
    """A file's content at `commit`."""
    with open_repo(root) as repo:
        return repo.git.show(f"{commit}:{path}", strip_newline_in_stdout=False)


def delete_run(run_id: str, root: Path | None = None) -> None:
    """Remove a run's worktree and branch (tests and `kopt history --prune` only)."""
    remove_worktree(run_id, root)
    with open_repo(root) as repo:
        branch = _find_branch(repo, run_id)
        repo.git.branch("-D", branch)
    shutil.rmtree(worktree_path(run_id, root), ignore_errors=True)

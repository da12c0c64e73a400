"""A local job may run in a worker started ahead of it (torch and triton imported, nothing
else done); the verifier's reference job never does, and a standby outlives the thread that
finished the job before it (that it dies with the kopt process: test_local_worker_lifetime)."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from kopt.harness.job import stage_job
from kopt.harness.targets import standby
from kopt.harness.targets.local import LocalTarget

CORPUS = Path(__file__).parent / "corpus"


@pytest.fixture(autouse=True)
def _no_leftover_standby():
    from kopt.harness.targets.local import ISOLATED

    standby.STANDBY.clear()
    ISOLATED.clear()
    yield
    standby.STANDBY.clear()
    ISOLATED.clear()


def _echo(message: str = "x") -> Path:
    return stage_job("echo", {"message": message})


def test_the_next_job_takes_the_standby_started_when_the_last_one_ended(workspace: Path) -> None:
    target = LocalTarget()
    first = target.run(_echo("one"), timeout=120)
    assert first.ok and first.response["worker_started"] == "cold"
    lines: list[str] = []
    second = target.run(_echo("two"), timeout=120, on_line=lines.append)
    assert second.ok and second.response["worker_started"] == "standby"
    assert "echo: two" in lines  # output still streams, after the hand-over
    assert second.response["message"] == "two"


def test_a_different_environment_starts_cold(workspace: Path) -> None:
    target = LocalTarget()
    assert target.run(_echo(), timeout=120).ok
    # read when Python starts: a process started without it cannot take the job
    other = target.run(_echo(), timeout=120, env={"PYTHONHASHSEED": "7"})
    assert other.ok and other.response["worker_started"] == "cold"


def test_the_reference_job_takes_only_an_isolated_standby(workspace: Path, monkeypatch) -> None:
    """The reference job never runs in the ordinary standby; a job's end prepares an isolated
    one (python -I -S, imports done, nothing else run), which the next reference takes."""
    from kopt.harness.targets import local

    target = LocalTarget()
    # a verification's candidate job (here one that fails at once) prepares both standbys as
    # it ends; any other job only the ordinary one
    target.run(stage_job("candidate", {}), timeout=120)
    taken: list[str] = []
    monkeypatch.setattr(standby.STANDBY, "take", lambda env, job_dir=None: taken.append("x"))
    job = stage_job("reference", {"device": "cpu", "sets": []})
    outcome = target.run(job, timeout=120)
    assert taken == []
    assert (outcome.response or {}).get("worker_started") == "standby"
    assert (outcome.response or {}).get("isolated") is True
    local.ISOLATED.clear()  # none waiting: cold, still isolated
    cold = target.run(stage_job("reference", {"device": "cpu", "sets": []}), timeout=120)
    assert (cold.response or {}).get("worker_started") == "cold"
    assert (cold.response or {}).get("isolated") is True
    echo = target.run(_echo(), timeout=120)
    assert echo.response["isolated"] is False  # an ordinary job's worker is not
    assert not local.ISOLATED.waiting()  # and its end prepared no isolated one


def test_switched_off_by_the_environment(workspace: Path, monkeypatch) -> None:
    monkeypatch.setenv(standby.ENV_SWITCH, "0")
    target = LocalTarget()
    assert target.run(_echo(), timeout=120).ok
    again = target.run(_echo(), timeout=120)
    assert again.ok and again.response["worker_started"] == "cold"


def test_a_target_made_without_standbys_never_uses_one(workspace: Path) -> None:
    """Ray tasks run jobs this way: their worker process is shared and may be killed."""
    target = LocalTarget(standby=False)
    for _ in range(2):
        outcome = target.run(_echo(), timeout=120)
        assert outcome.ok and outcome.response["worker_started"] == "cold"
    assert not standby.STANDBY.waiting()


def test_a_standby_outlives_the_thread_that_prepared_it(workspace: Path) -> None:
    """PR_SET_PDEATHSIG fires when the starting *thread* ends: standbys come from one
    long-lived thread, so a job finished on a pool thread leaves a usable standby."""
    target = LocalTarget()

    def job_then_linger() -> None:
        target.run(_echo("in a thread"), timeout=120)
        time.sleep(2.0)  # the standby asks for its death signal while this thread lives

    done = threading.Thread(target=job_then_linger)
    done.start()
    done.join()
    time.sleep(1.0)  # the thread is gone; a death signal tied to it would have fired by now
    outcome = target.run(_echo("main"), timeout=120)
    assert outcome.ok and outcome.response["worker_started"] == "standby"


def test_kopt_settings_travel_with_the_job(workspace: Path, tmp_path: Path) -> None:
    """A measure job sets KOPT_CACHE, a verification does not: the standby from one still
    takes the other, and the job sees its own settings, not the previous job's."""
    target = LocalTarget()
    assert target.run(_echo(), timeout=120, env={"KOPT_CACHE": str(tmp_path / "a")}).ok
    second = target.run(_echo(), timeout=120, env={"KOPT_SSH_CONFIG": "x"})
    assert second.ok and second.response["worker_started"] == "standby"
    settings = second.response["kopt_settings"]
    assert settings.get("KOPT_SSH_CONFIG") == "x"
    assert "KOPT_CACHE" not in settings or settings["KOPT_CACHE"] != str(tmp_path / "a")


def test_the_verifier_starts_both_standbys_before_it_draws(
        workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference's isolated interpreter and the candidate's worker import torch, dynamo
    and triton (~2 s each on a 2-core CPU) while the parent draws the inputs: even a process's
    first verification (one `kopt verify`) finds both started, although the parent's draws set
    torch's compile-cache variable in its environment after they were."""
    from kopt.harness.verify import verify_candidate

    corpus = Path(__file__).parent / "corpus"
    events: list[str] = []
    run, prepare = LocalTarget.run, LocalTarget.prepare

    def recording_run(self, job_dir, **kw):
        outcome = run(self, job_dir, **kw)
        events.append(f"{Path(job_dir).name.split('-')[0]}:{(outcome.response or {}).get('worker_started')}")
        return outcome

    def recording_prepare(self, env=None, jobs_root=None):
        events.append("prepare")
        prepare(self, env, jobs_root)

    monkeypatch.setattr(LocalTarget, "run", recording_run)
    monkeypatch.setattr(LocalTarget, "prepare", recording_prepare)
    report = verify_candidate(corpus / "cases" / "softmax_small", corpus / "honest" / "softmax.py",
                              device="cpu")
    assert report.accepted, report.to_text()
    assert events == ["prepare", "reference:standby", "candidate:standby"], events
    # and the process's next verification
    again = verify_candidate(corpus / "cases" / "softmax_small", corpus / "honest" / "softmax.py",
                             device="cpu")
    assert again.accepted, again.to_text()
    assert events[3:] == ["prepare", "reference:standby", "candidate:standby"]
    isolated = next(c for c in again.checks if c.name == "isolated_reference")
    assert isolated.passed and "python -I -S" in isolated.detail and "started ahead" in isolated.detail


def test_a_variable_torch_sets_on_import_does_not_turn_a_standby_away() -> None:
    """torch sets TORCHINDUCTOR_CACHE_DIR to its default in a process that imports dynamo: the
    parent, mid-verification, and the standby, before its job. One side without it is the
    same environment; the same variable set to two values, or any other difference, is not."""
    base = {"PATH": "/bin", "KOPT_CACHE": "/a"}
    cache = {**base, "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_u"}
    assert standby._same_env(base, cache) and standby._same_env(cache, base)
    assert standby._same_env({**base, "KOPT_CACHE": "/b"}, base)  # kopt's own: handed over
    assert not standby._same_env(cache, {**cache, "TORCHINDUCTOR_CACHE_DIR": "/elsewhere"})
    assert not standby._same_env(base, {**base, "PYTHONHASHSEED": "7"})


def test_kopt_verify_starts_both_workers_before_its_own_imports(
        workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`kopt verify` starts the reference's isolated interpreter and the candidate's worker
    before the CLI imports its command modules (and torch with them), and the verification's
    jobs take those two processes."""
    from kopt.harness.targets.local import ISOLATED
    from kopt.workbench import cli

    corpus = Path(__file__).parent / "corpus"
    seen: dict[str, object] = {}
    build = cli.build_parser

    def spying_build():  # type: ignore[no-untyped-def]
        seen["isolated"] = (ISOLATED.waiting() or [None])[0]
        seen["standby"] = (standby.STANDBY.waiting() or [None])[0]
        return build()

    taken: list[object] = []
    for waiting in (ISOLATED, standby.STANDBY):
        def recording_take(env, job_dir=None, take=waiting.take):  # type: ignore[no-untyped-def]
            proc = take(env, job_dir)
            taken.append(proc)
            return proc

        monkeypatch.setattr(waiting, "take", recording_take)
    monkeypatch.setattr(cli, "build_parser", spying_build)
    (workspace / ".kopt").mkdir()  # a workspace some kopt command has used before
    code = cli.main(["verify", str(corpus / "cases" / "softmax_small"),
                     str(corpus / "honest" / "softmax.py"), "--device", "cpu"])
    assert code == 0
    assert seen["isolated"] is not None and seen["standby"] is not None
    # the reference's job, then the candidate's, each took the process started first
    assert taken[:2] == [seen["isolated"], seen["standby"]], taken


def test_early_workers_only_for_a_local_verification() -> None:
    from kopt.workbench import early_workers

    for argv in (["cases"], ["run", "softmax", "--target", "gpu1"], ["verify", "--help"], ["verify", "c", "k", "--target", "gpu1"],
                 ["verify", "c", "k", "--no-sandbox"], ["verify", "c", "k", "--device", "tpu"], []):
        assert early_workers.start(argv) is False, argv
    assert not standby.STANDBY.waiting()
    assert early_workers._device(["verify", "c", "k", "--device=cpu"]) == "cpu"
    assert early_workers._device(["verify", "c", "k", "--device", "cuda"]) == "cuda"


def test_a_gpu_run_keeps_two_standbys_unless_the_user_says(monkeypatch: pytest.MonkeyPatch) -> None:
    from kopt.workbench import early_workers

    monkeypatch.setenv(standby.ENV_SWITCH, "")  # recorded, so that teardown undoes the test's
    monkeypatch.delenv(standby.ENV_SWITCH)
    early_workers.default_depth(["run", "softmax"], "cpu")
    early_workers.default_depth(["verify", "c", "k"], "cuda")
    assert standby.depth() == 1  # the CPU, and commands other than run: one
    early_workers.default_depth(["run", "softmax"], "cuda")
    assert standby.depth() == 2
    monkeypatch.setenv(standby.ENV_SWITCH, "1")
    early_workers.default_depth(["run", "softmax"], "cuda")
    assert standby.depth() == 1  # the user's setting stands


def test_a_standby_with_cuda_initialised_leaves_and_its_job_starts_cold(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A forked candidate cannot use CUDA initialised before the fork: a standby that finds it
    initialised after its imports exits without taking a job."""
    import io

    import torch

    from kopt.harness import worker

    monkeypatch.setattr(worker, "_die_with_parent", lambda: None)
    monkeypatch.setattr("sys.stdin", io.StringIO('{"job_dir": "/nonexistent", "env": {}}\n'))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert worker.fork_safe() is False
    assert worker._standby() is None  # left before reading its job
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert worker.fork_safe() is True


def test_the_compile_preload_only_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU standby imports what the torch.compile draw needs, and does nothing else: no
    compile (which would initialise CUDA before the fork), a missing module skipped."""
    import sys

    import torch

    from kopt.harness import worker

    compiled: list[object] = []
    monkeypatch.setattr(torch, "compile", lambda *a, **k: compiled.append(a))
    monkeypatch.setattr(worker, "COMPILE_MODULES", (*worker.COMPILE_MODULES, "no_such_module_kopt"))
    worker.preload_compile_modules()
    assert compiled == []
    assert worker.fork_safe()
    # in a fresh process (this one may have imported them already): absent, then imported
    import subprocess

    probe = ("import sys, torch, torch._dynamo\n"
             "from kopt.harness import worker\n"
             "names = [n for n in worker.COMPILE_MODULES]\n"
             "before = [n for n in names if n in sys.modules]\n"
             "worker.preload_compile_modules()\n"
             "after = [n for n in names if n in sys.modules]\n"
             "print(len(names) - len(before), len(after) == len(names))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert int(out[0]) > 0 and out[1] == "True", out


@pytest.mark.parametrize("interpret", [False, True])
def test_the_next_worker_imports_beside_a_running_job_off_the_interpreter(
        workspace: Path, interpret: bool, monkeypatch) -> None:
    """On a GPU host a standby for the next job starts when a job takes its worker, so it
    imports while the job runs; under the CPU interpreter (the cores are the job's) only after
    the job ends."""
    from kopt.harness.targets.local import ISOLATED

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # this test process's own setting
    target = LocalTarget()
    # unsandboxed, so that the echo job (ours) sees the test's file: a sandbox's /tmp is private
    env = {"KOPT_SANDBOX": "0", **({"TRITON_INTERPRET": "1"} if interpret else {})}
    flag = workspace / "go"
    seen: dict[str, object] = {}

    def watch(line: str) -> None:
        if line.startswith("echo:") and "waiting" not in seen:
            seen["waiting"] = bool(standby.STANDBY.waiting())
            seen["isolated"] = bool(ISOLATED.waiting())
            flag.touch()

    job = stage_job("echo", {"message": "m", "await_file": str(flag), "await_s": 60})
    outcome = target.run(job, timeout=120, env=env, on_line=watch)
    assert outcome.ok and outcome.response["acknowledged"] is True
    assert seen["waiting"] is (not interpret)
    assert seen["isolated"] is (not interpret)  # the next verification's reference, likewise
    assert bool(standby.STANDBY.waiting())  # after the job, one is waiting either way


def test_a_standby_forks_its_candidate_child_before_the_job_and_drops_it_for_others(
        workspace: Path) -> None:
    """A standby forks the candidate's child while it waits (its imports, and on a GPU CUDA's
    context, made before the job); a candidate job drives that child, any other job ends it
    first (it must not hold the GPU while a job times), and a reference's isolated standby
    forks none."""
    from kopt.harness.verify import verify_candidate

    case, candidate = CORPUS / "cases" / "softmax_small", CORPUS / "honest" / "softmax.py"
    target = LocalTarget()
    env = {"KOPT_SANDBOX": "0"}  # unsandboxed: the echo job's /proc shows the host's pids
    assert target.run(_echo(), timeout=120, env=env).ok  # leaves a standby with an early child
    other = target.run(_echo(), timeout=120, env=env)
    assert other.ok and other.response["worker_started"] == "standby"
    assert other.response["children"] == []  # the early child was ended before the job ran
    standby.STANDBY.clear()
    jobs: list[dict] = []

    class Recording(LocalTarget):
        def run(self, job_dir, **kw):  # type: ignore[override]
            outcome = super().run(job_dir, **kw)
            jobs.append(outcome.response or {})
            return outcome

    report = verify_candidate(case, candidate, device="cpu", target=Recording())
    assert report.accepted, report.failed()
    cand = [r for r in jobs if "child" in r]
    assert cand and cand[0]["worker_started"] == "standby" and cand[0]["child"] == "early"
    assert report.check("no_tampering").passed and report.check("isolated_reference").passed


def test_the_early_workers_of_a_run_have_its_compile_caches(
        workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`kopt run` points the compile caches at `.kopt/cache/` in its environment; workers
    started before that would never match its jobs (on the H100 the architect's first
    measure job and the first reference started cold)."""
    from kopt.harness.paths import use_compile_caches, workspace_root
    from kopt.workbench import early_workers

    for key in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        monkeypatch.setenv(key, "restored after the test")
        monkeypatch.delenv(key)
    # a workspace no kopt command has used: none (a refused command must write nothing)
    assert not early_workers.start(["run", "softmax", "--device", "cpu"])
    assert [p.name for p in workspace.iterdir() if p.name != ".git"] == []
    (workspace / ".kopt").mkdir()
    assert early_workers.start(["run", "softmax", "--device", "cpu"])
    use_compile_caches(workspace_root())  # what the run does when it opens its context
    outcome = LocalTarget().run(_echo(), timeout=120, env={"TRITON_INTERPRET": "1"})
    assert outcome.ok and outcome.response["worker_started"] == "standby"


def test_kopt_worker_standby_n_keeps_up_to_n_waiting_and_hands_out_the_oldest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The workbench keeps two (a saved edit's verification and its timing job each find one
    ready); the default keeps one; a pool made with `most` keeps that many whatever the
    variable says (the reference's isolated interpreter)."""
    def waiter() -> list[str]:
        return [sys.executable, "-c", "import sys; sys.stdin.readline()"]

    env = dict(os.environ)
    pools = []
    for value, most, kept in (("2", None, 2), ("1", None, 1), ("", None, 1), ("3", 1, 1)):
        monkeypatch.setenv(standby.ENV_SWITCH, value)
        pool = standby.Standby(waiter, most=most)
        pools.append(pool)
        for _ in range(4):
            pool.prepare(env)
        assert len(pool.waiting()) == kept, (value, most)
    try:
        monkeypatch.setenv(standby.ENV_SWITCH, "2")
        first, second = pools[0].waiting()
        assert pools[0].take(env) is first and pools[0].waiting() == [second]
        pools[0].prepare(env)
        assert pools[0].waiting()[0] is second and len(pools[0].waiting()) == 2
        first.kill()
        first.wait()
    finally:
        for pool in pools:
            pool.clear()


def test_a_standby_asked_for_while_the_process_exits_is_not_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """At exit the spawner's executor is shut down; a job a stopped suite's thread still starts
    then runs without a standby instead of failing its problem."""
    from concurrent.futures import ThreadPoolExecutor

    gone = ThreadPoolExecutor(max_workers=1)
    gone.shutdown()
    monkeypatch.setattr(standby, "_SPAWNER", gone)
    pool = standby.Standby(lambda: [sys.executable, "-c", "pass"])
    pool.prepare(dict(os.environ))
    assert pool.waiting() == []

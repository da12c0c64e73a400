"""A run's evaluations spread over its targets' slots (issue 8.3), through RunContext, the
optimizer and the accelerator: results in task order, a lost target's work re-queued, timings
only on the baseline's GPU model, and one local slot exactly as before."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_pipeline_fakes import BROKEN_KERNEL, GOOD_KERNEL, fake_measure, fake_verify, fakes

from kopt.harness.errors import TargetLost
from kopt.harness.parallel import Slot
from kopt.harness.targets.base import WorkerOutcome
from kopt.harness.targets.local import LocalTarget
from kopt.phases import history
from kopt.phases.engineers.base import EngineerRequest, Proposal
from kopt.phases.pipeline import run_pipeline
from kopt.phases.run import RunConfig, open_context


class FakeHost:
    """A target with `gpus` slots of one GPU model; after `lose_after` jobs it is gone."""

    def __init__(self, name: str, gpus: int = 1, *, model: str = "Fake H100",
                 lose_after: int | None = None) -> None:
        self.name, self.gpus, self.model, self.lose_after = name, gpus, model, lose_after
        self.ran: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.busy = 0
        self.max_busy = 0

    def parallel_slots(self) -> list[Slot]:
        return [Slot(self, {"CUDA_VISIBLE_DEVICES": str(i)}, gpu=f"{self.model} #{i}")
                for i in range(self.gpus)]

    def run(self, job_dir: Path, *, timeout: float, env: dict[str, str] | None = None,
            on_line: Any = None) -> WorkerOutcome:
        with self.lock:
            lost = self.lose_after is not None and len(self.ran) >= self.lose_after
            self.ran.append((Path(job_dir).name, (env or {}).get("CUDA_VISIBLE_DEVICES", "-")))
            self.busy += 1
            self.max_busy = max(self.max_busy, self.busy)
        try:
            time.sleep(0.05)  # long enough for the other slots to start theirs
            if lost:
                raise TargetLost(f"{self.name} dropped", fix="re-queued elsewhere")
            return WorkerOutcome(0, False, {"ok": True}, host=self.name)
        finally:
            with self.lock:
                self.busy -= 1

    def describe(self) -> dict[str, Any]:
        return {"reachable": True}


def on_target(target: Any, what: str) -> None:
    """A fake evaluation's job on `target` (raises TargetLost when it is gone)."""
    if target is not None:
        target.run(Path(what), timeout=10)


def verify_on(case: Any, path: Path, *, target: Any = None, **_: Any) -> Any:
    on_target(target, Path(path).name)
    return fake_verify(case, path)


def measure_on(case: Any, variant: Any, *, target: Any = None, **kw: Any) -> dict[str, Any]:
    on_target(target, Path(str(variant)).name)
    return fake_measure(case, variant, **kw)


def tune_on(case: Any, paths: list[Path], *, target: Any = None,
            **_: Any) -> list[dict[str, Any]]:
    on_target(target, "+".join(Path(p).name for p in paths))
    rows = []
    for p in paths:
        ms = fake_measure(case, p)["latency_ms"]["median"]
        rows.append({"ok": True, "checked": True, "detail": "output matches", "median_ms": ms,
                     "p20_ms": ms, "p80_ms": ms})
    return rows


@pytest.fixture
def repo(workspace: Path) -> Path:
    history.init_workspace(workspace)
    return workspace


def context(repo: Path, targets: list[Any], **fakes_: Any) -> Any:
    config = RunConfig(run_id="p1", case="layernorm_gelu")
    return open_context(config, root=repo, targets=targets,
                        **{"verify": verify_on, "measure": measure_on, **fakes_})


def candidates(tmp: Path, count: int, broken: tuple[int, ...] = ()) -> list[Path]:
    files = []
    for i in range(count):
        f = tmp / f"cand{i}.py"
        f.write_text(BROKEN_KERNEL if i in broken else GOOD_KERNEL.format(ms=1.0 / (i + 1)))
        files.append(f)
    return files


def test_verify_candidates_spread_over_slots_in_task_order_and_requeue_a_lost_host(
        repo: Path, tmp_path: Path) -> None:
    flaky, steady = FakeHost("flaky", lose_after=1), FakeHost("steady", gpus=2)
    ctx = context(repo, [flaky, steady])
    assert len(ctx.slots()) == 3 and not ctx.serial
    files = candidates(tmp_path, 6, broken=(1, 4))
    reports = ctx.verify_candidates(files)
    assert [r.accepted for r in reports] == [True, False, True, True, False, True]
    ran = [name for name, _ in flaky.ran + steady.ran]
    assert sorted(set(ran)) == sorted(f.name for f in files)  # every file, nothing lost
    lost = flaky.ran[-1][0]
    assert len(flaky.ran) == 2 and ran.count(lost) == 2  # the lost one ran again, on `steady`
    assert steady.max_busy == 2  # both of its GPUs at once, one evaluation each
    # the lost host takes no more of this run's work
    ctx.verify_candidates(files[:2])
    assert len(flaky.ran) == 2


def test_timings_stay_on_the_baselines_gpu_model(repo: Path, tmp_path: Path) -> None:
    primary, other = FakeHost("h100s", gpus=2), FakeHost("a100", gpus=2, model="Fake A100")
    ctx = context(repo, [primary, other], tune=tune_on)
    assert [s.gpu for s in ctx.timing_slots()] == ["Fake H100 #0", "Fake H100 #1"]
    files = candidates(tmp_path, 5)
    rows = ctx.time_trials(files, budget_s=10)
    assert [r["median_ms"] for r in rows] == [1.0 / (i + 1) for i in range(5)]
    assert {r["host"] for r in rows} == {"h100s"} and not other.ran
    assert sorted(name for name, _ in primary.ran) == ["cand0.py+cand1.py+cand2.py",
                                                       "cand3.py+cand4.py"]
    metrics = ctx.measure_variants([(f, f"iter-{i}") for i, f in enumerate(files)])
    assert [m["latency_ms"]["median"] for m in metrics] == [1.0 / (i + 1) for i in range(5)]
    assert {m["host"] for m in metrics} == {"h100s"}
    assert {m["gpu"].split(" #")[0] for m in metrics} == {"Fake H100"}
    # verification is not a timing: every GPU takes a share
    ctx.verify_candidates(files)
    assert other.ran


def test_one_local_slot_runs_as_before(repo: Path, tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    def verify(case: Any, path: Path, **kw: Any) -> Any:
        seen.append(kw)
        return fake_verify(case, path)

    config = RunConfig(run_id="p1", case="layernorm_gelu")
    ctx = open_context(config, root=repo, verify=verify, measure=fake_measure)
    if len(ctx.slots()) > 1:
        pytest.skip("this machine has several GPUs: the local target has several slots")
    assert ctx.serial and ctx.slots()[0].name == "local"
    reports = ctx.verify_candidates(candidates(tmp_path, 3, broken=(0,)))
    assert [r.accepted for r in reports] == [False, True, True]
    assert seen == [{}, {}, {}]  # no target handed down: the harness's default path


def test_config_takes_several_targets_and_a_parallel_cap(repo: Path) -> None:
    config = RunConfig(run_id="p1", case="x", target="ssh://a, ssh://b", parallel=2)
    assert (config.target, config.targets, config.target_specs) == (
        "ssh://a", ["ssh://b"], ["ssh://a", "ssh://b"])
    config.save(repo / "r")
    assert RunConfig.load(repo / "r") == config
    ctx = context(repo, [FakeHost("a", gpus=4), FakeHost("b", gpus=4)])
    ctx.config.parallel = 3
    assert [s.name for s in ctx.slots()] == ["a", "b", "a"]
    from kopt.harness.errors import BadInputError

    with pytest.raises(BadInputError, match="--parallel 0"):
        RunConfig(run_id="p1", case="x", parallel=0)
    with pytest.raises(BadInputError, match="names no target"):
        RunConfig(run_id="p1", case="x", target=" , ")


class SeveralPerRound:
    """Proposes three candidates a round: the main kernel and two alternatives (one broken)."""

    name = "offline"

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options

    def propose(self, request: EngineerRequest, events: Any) -> Proposal:
        kernels = request.worktree / "kernels"
        kernels.mkdir(exist_ok=True)
        r = request.iteration
        (kernels / f"{request.case.name}.py").write_text(GOOD_KERNEL.format(ms=1.0 / (3 * r)))
        (kernels / "alt_a.py").write_text(BROKEN_KERNEL)
        (kernels / "alt_b.py").write_text(GOOD_KERNEL.format(ms=1.0 / (3 * r + 1)))
        return Proposal(candidate=f"kernels/{request.case.name}.py",
                        alternatives=["kernels/alt_a.py", "kernels/alt_b.py"],
                        notes=f"three candidates in round {r}")


@pytest.mark.parametrize("hosts", ["one local slot", "a lost host and a steady one"])
def test_optimizer_commits_several_candidates_a_round_in_task_order(repo: Path,
                                                                    hosts: str) -> None:
    f = {**fakes(), "verify": verify_on, "measure": measure_on,
         "engineer_factory": lambda spec, options: SeveralPerRound(options)}
    if hosts != "one local slot":
        flaky, steady = FakeHost("flaky", lose_after=0), FakeHost("steady", gpus=2)
        f["targets"] = [steady, flaky]  # steady first: it timed the baseline
    run_pipeline("layernorm_gelu", iterations=2, run_id="r1", phases="architect,optimizer",
                 fakes=f)
    records = [json.loads(line) for line in
               (repo / "manifests/r1/optimizer/iterations.jsonl").read_text().splitlines()]
    # per round: main, alt_a (rejected), alt_b -- committed in that order whatever finished first
    assert [(r["round"], r["iteration"], r["verdict"]) for r in records] == [
        (1, 1, "accepted"), (1, 2, "rejected"), (1, 3, "accepted"),
        (2, 4, "accepted"), (2, 5, "rejected"), (2, 6, "accepted")]
    assert [r["median_ms"] for r in records if r["median_ms"]] == pytest.approx(
        [1 / 3, 1 / 4, 1 / 6, 1 / 7])
    commits = history.get_run("r1", repo).iterations
    assert [c.iteration for c in commits] == [1, 2, 3, 4, 5, 6]
    assert "BROKEN" in history.show_file(commits[1].commit, "kernels/layernorm_gelu.py")
    rounds = [json.loads(line) for line in
              (repo / "manifests/r1/optimizer/rounds.jsonl").read_text().splitlines()]
    assert [r["iterations"] for r in rounds] == [[1, 2, 3], [4, 5, 6]]
    assert rounds[0]["alternatives"] == ["kernels/alt_a.py", "kernels/alt_b.py"]
    assert "1.00x" not in rounds[0]["feedback_next"]  # the round's best fed back: alt_b
    manifest = json.loads((repo / "manifests/r1/optimizer.json").read_text())
    assert manifest["details"]["best"]["iteration"] == 6
    if hosts != "one local slot":
        assert len(flaky.ran) == 1  # lost on its first job, then given no more
        lost = flaky.ran[0][0]
        assert (lost, "0") in steady.ran or (lost, "1") in steady.ran  # that job ran again


def test_accelerator_search_spread_over_gpus_with_a_lost_host(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kopt.phases import accelerator

    run_pipeline("layernorm_gelu", iterations=2, run_id="r1", phases="architect,optimizer",
                 fakes=fakes())
    monkeypatch.setattr("kopt.phases.run.local_gpu_name", lambda: "not this machine's GPU")
    steady, flaky = FakeHost("steady", gpus=2), FakeHost("flaky", lose_after=0)
    # the flaky host first: the search's first tune job goes to it, and is lost
    f = {**fakes(), "verify": verify_on, "measure": measure_on, "tune": tune_on,
         "targets": [flaky, steady]}
    ctx = open_context(RunConfig.load(repo / "manifests/r1"), root=repo, **f)
    ctx.device = "cuda"  # the search path; the fake hosts stand in for the GPUs
    d = accelerator.run(ctx, lambda e: None).details
    assert d["gpu"] == "Fake H100"  # the GPU that timed the trials, not this machine's
    # start, the sweep's two, BLOCK_ROWS 4, the second pass's sweep, the joint check's two
    assert d["budget"]["trials_run"] == 7 and d["budget"]["timed_and_checked"] == 7
    # the coordinate search (BLOCK_ROWS 1 -> 2 -> 4; num_warps gains nothing in the fake)
    assert d["winner"]["config"] == {"BLOCK_ROWS": 4, "num_warps": 4}
    # the joint check's two trials were spread over two slots; the lost host's share ran on
    # `steady`
    tuned = [name for name, _ in steady.ran if "+" not in name and "trial-" in name]
    assert tuned and flaky.ran and flaky.ran[0][0] in [n for n, _ in steady.ran]
    assert "Fake_H100.json" in d["remembered"]
    assert {t["host"] for t in d["trials"]} == {"steady"}  # provenance of every timing
    assert {t["gpu"] for t in d["trials"]} <= {"Fake H100 #0", "Fake H100 #1"}


def test_a_run_never_times_on_another_gpu_model_than_its_baseline(repo: Path) -> None:
    from kopt.harness.errors import BadInputError
    from kopt.phases import optimizer

    def measure_h100(case: Any, variant: Any, **kw: Any) -> dict[str, Any]:
        return {**fake_measure(case, variant, **kw),
                "environment": {"host": "box", "gpu": {"name": "Fake H100"}}}

    run_pipeline("layernorm_gelu", iterations=1, run_id="r1", phases="architect",
                 fakes={**fakes(), "measure": measure_h100})
    f = {**fakes(), "verify": verify_on, "measure": measure_on}
    ctx = open_context(RunConfig.load(repo / "manifests/r1"), root=repo,
                       targets=[FakeHost("swapped", gpus=2, model="Fake A100")], **f)
    ctx.device = "cuda"
    assert ctx.baseline_gpu() == "Fake H100"
    with pytest.raises(BadInputError, match="baseline was timed on 'Fake H100' but .* now "
                                            "times on 'Fake A100'"):
        optimizer.run(ctx, lambda e: None)
    same = open_context(RunConfig.load(repo / "manifests/r1"), root=repo,
                        targets=[FakeHost("same", gpus=2)], **f)
    same.device = "cuda"
    same.check_timing_gpu()  # the same model: fine


def test_run_records_its_targets_and_parallel_cap(repo: Path) -> None:
    run_pipeline("layernorm_gelu", iterations=1, run_id="r1", phases="architect,optimizer",
                 target="local, local", parallel=2, fakes=fakes())
    config = json.loads((repo / "manifests/r1/run.json").read_text())
    assert (config["target"], config["targets"], config["parallel"]) == ("local", ["local"], 2)


def test_kopt_run_rejects_a_parallel_count_below_one(repo: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from kopt.workbench.cli import main as kopt

    assert kopt(["run", "layernorm_gelu", "--parallel", "0", "--yes"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--parallel 0 is not a positive count" in err
    assert not (repo / "manifests").exists()


class LosesItsFirstJob(LocalTarget):
    """The local target, except that its first job is lost before it starts (a dropped host)."""

    def __init__(self) -> None:
        self.name = "flaky-local"
        self.jobs = 0

    def run(self, job_dir: Path, **kwargs: Any) -> WorkerOutcome:
        self.jobs += 1
        if self.jobs == 1:
            raise TargetLost(f"{self.name} dropped", fix="re-queued elsewhere")
        return super().run(job_dir, **kwargs)


@pytest.mark.slow
def test_real_harness_through_two_local_targets_one_lost(workspace: Path) -> None:
    """The harness's own verify and measure take a run's slots as targets (~20 s on 2 cores)."""
    corpus = Path(__file__).resolve().parent / "corpus"
    steady, flaky = LocalTarget(), LosesItsFirstJob()
    config = RunConfig(run_id="p1", case=str(corpus / "cases" / "softmax_small"), device="cpu")
    ctx = open_context(config, root=workspace, targets=[steady, flaky])
    assert len(ctx.slots()) == 2 and [s.target for s in ctx.timing_slots()] == [steady]
    honest, cheat = corpus / "honest" / "softmax.py", corpus / "cheats" / "near_zero_output.py"
    reports = ctx.verify_candidates([cheat, honest])
    assert [r.accepted for r in reports] == [False, True]
    assert [Path(r.candidate).name for r in reports] == [cheat.name, honest.name]
    assert not next(c for c in reports[0].checks if c.name == "correct").passed
    assert flaky.jobs == 1  # lost once, then given no more of the run's work
    [metrics] = ctx.measure_variants([(honest, "iter-1")])
    assert metrics["ok"] and metrics["host"] == "local" and metrics["environment"]["host"]
    assert (ctx.artifacts_dir / "iter-1" / "metrics.json").is_file()

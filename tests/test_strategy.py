"""The optimizer walks the offline engineer's strategy space (phases/strategy.py): each round
tests a different hypothesis, picked from the last iteration's profile facts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_pipeline_fakes import GOOD_KERNEL, FakeEngineer, fakes, gpu_fakes

from kopt.phases import history
from kopt.phases.engineers.base import Proposal
from kopt.phases.engineers.prompts import engineer_first_message
from kopt.phases.manifest import read_manifest
from kopt.phases.pipeline import run_pipeline
from kopt.phases.strategy import HYPOTHESES, ProfileFacts, apply_kopt_config, facts_of, pick_next


def _facts(kernels: list[tuple[str, str, float]], iteration: int, pct: float,
           bound: str) -> ProfileFacts:
    """Profile facts of a verified iteration whose kernels are (name, kind, ms)."""
    profile = {"kernels": [{"name": name, "total_ms": ms} for name, _, ms in kernels]}
    return facts_of({"iteration": iteration, "verdict": "accepted", "pct_of_floor": pct},
                    [{"name": name, "kind": kind} for name, kind, _ in kernels], profile, bound)


def test_the_next_hypothesis_aims_at_the_hot_kernel_and_its_bound() -> None:
    facts = _facts([("_g0_add_kernel", "pointwise", 1.0), ("_g1_softmax_kernel", "reduction", 3.0)],
                   2, 41.0, "memory")
    assert facts.hot["name"] == "_g1_softmax_kernel" and facts.hot["share"] == 0.75
    first = pick_next(facts, set())
    assert first is not None and "reduction" in first.kinds and first.bound in (None, "memory")
    second = pick_next(facts, {first.name})
    assert second is not None and second.name != first.name and "reduction" in second.kinds
    # a matmul hypothesis never applies to a candidate without a matmul
    names = set()
    while (h := pick_next(facts, names)) is not None:
        names.add(h.name)
    assert not any("matmul" in n for n in names) and len(names) < len(HYPOTHESES)
    assert "Hottest kernel: _g1_softmax_kernel (reduction), 3 ms (75% of kernel time)." in \
        facts.text()


def test_a_hot_attention_kernel_is_tested_against_its_scores_in_memory() -> None:
    facts = _facts([("_g0_addmm_kernel", "matmul", 1.0), ("_g1_bmm_kernel", "attention", 4.0)],
                   1, 30.0, "compute")
    first = pick_next(facts, set())
    assert first is not None and first.name == "attention with its scores in memory", first
    assert first.options == {"policy": "no matmul epilogue"}


def test_a_launch_hypothesis_sets_the_declared_value_of_every_kernel_of_its_kind() -> None:
    source = ('KOPT_TUNABLES = {"_r": {"BLOCK_SIZE": [1024, 4096, 16384]}, '
              '"_p": {"BLOCK_SIZE": [1024, 4096]}}\n'
              'KOPT_CONFIG = {"_r": {"BLOCK_SIZE": 16384, "num_warps": 8}, '
              '"_p": {"BLOCK_SIZE": 1024, "num_warps": 4}}\n')
    kernels = [{"name": "_r", "kind": "reduction"}, {"name": "_p", "kind": "pointwise"}]
    out, changed = apply_kopt_config(source, kernels, {"reduction": {"BLOCK_SIZE": 4096,
                                                                      "num_stages": 3}})
    assert changed == ["_r.BLOCK_SIZE=4096"]  # the kernel launches with no num_stages
    assert '"BLOCK_SIZE": 4096, "num_warps": 8' in out.replace("'", '"')
    assert apply_kopt_config(source, kernels, {"matmul": {"BACKEND": "cublas"}}) == (source, [])


class HypothesisEngineer(FakeEngineer):
    """A reduction kernel whose speed depends on the hypothesis it is asked to test; the
    `reductions with 4 warps` hypothesis changes nothing (the same bytes as before)."""

    def propose(self, request, events):  # type: ignore[no-untyped-def]
        self.requests.append(request)
        h = request.options.get("hypothesis")
        out = request.worktree / "kernels" / f"{request.case.name}.py"
        out.parent.mkdir(exist_ok=True)
        same = h is None or h == "reductions with 4 warps"
        out.write_text(GOOD_KERNEL.format(ms=0.9 if same else 0.5)
                       + ("" if same else f"# tested: {h}\n"))
        return Proposal(candidate=f"kernels/{request.case.name}.py", notes="fake",
                        kernels=[{"name": "_g0_norm_kernel", "kind": "reduction"}])


@pytest.fixture
def repo(workspace: Path) -> Path:
    history.init_workspace(workspace)
    return workspace


def test_each_round_tests_a_different_hypothesis_and_its_commit_says_which(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engineers: list[FakeEngineer] = []
    f = gpu_fakes(monkeypatch, engineers, engineer=HypothesisEngineer)
    seen: list[str] = []
    run_pipeline("layernorm_gelu", iterations=3, run_id="r1", phases="architect,optimizer",
                 fakes=f, events=lambda e: seen.append(e.message))
    opt = read_manifest(repo / "manifests/r1/optimizer.json")
    tested = [h["name"] for h in opt.details["hypotheses"]]
    assert len(tested) == 2 and len(set(tested)) == 2
    assert all(any(t == h.name and "reduction" in h.kinds for h in HYPOTHESES) for t in tested)
    # every round committed a different kernel; none stopped with "proposed ... again"
    its = history.get_run("r1").iterations
    assert len(its) == 3 and not any("again (already verified)" in s for s in seen)
    kernels = {history.show_file(i.commit, "kernels/layernorm_gelu.py") for i in its}
    assert len(kernels) == 3
    body = subprocess.run(["git", "log", "-1", "--format=%B", its[-1].commit], cwd=repo,
                          capture_output=True, text=True, check=True).stdout
    assert f"Hypothesis: {tested[-1]} (" in body and f"Kopt-Hypothesis: {tested[-1]}" in body
    assert " ms vs " in body  # what it measured
    # the engineer got the last iteration's profile facts (an LLM engineer's prompt too)
    req = engineers[0].requests[1]
    assert req.options["profile_facts"]["hot"]["name"] == "_g0_norm_kernel"
    assert "Hottest kernel: _g0_norm_kernel" in req.options["profile_facts_text"]
    rounds = [json.loads(line) for line in
              (repo / "manifests/r1/optimizer/rounds.jsonl").read_text().splitlines()]
    assert [r["hypothesis"] for r in rounds] == [None, *tested]


def test_each_accepted_kernel_is_timed_once_and_its_profile_comes_from_that_job(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = gpu_fakes(monkeypatch, engineer=HypothesisEngineer)
    inner = f["measure"]
    calls: list[tuple[str, str | None, bool]] = []

    def measure(case, variant, **kw):  # type: ignore[no-untyped-def]
        calls.append((Path(str(variant)).name, kw.get("label"), bool(kw.get("profile"))))
        return inner(case, variant, **kw)

    f["measure"] = measure
    run_pipeline("layernorm_gelu", iterations=3, run_id="r1", phases="architect,optimizer",
                 fakes=f)
    kernels = [c for c in calls if c[0] not in ("eager", "compile")]
    # one timing job per iteration, profiled in that job; no second "profile-iter-N" job
    assert [c[1] for c in kernels] == ["iter-1", "iter-2", "iter-3"]
    assert all(c[2] for c in kernels)
    opt = read_manifest(repo / "manifests/r1/optimizer.json")
    assert len(opt.details["hypotheses"]) == 2  # the facts still chose each round's test


def test_a_hypothesis_that_repeats_a_verified_kernel_gives_way_to_the_next(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Stubborn(HypothesisEngineer):
        def propose(self, request, events):  # type: ignore[no-untyped-def]
            if request.options.get("hypothesis") == "reductions looped in 4096-wide blocks":
                request.options["hypothesis"] = "reductions with 4 warps"  # the same bytes
            return super().propose(request, events)

    f = gpu_fakes(monkeypatch, engineer=Stubborn)
    seen: list[str] = []
    run_pipeline("layernorm_gelu", iterations=2, run_id="r1", phases="architect,optimizer",
                 fakes=f, events=lambda e: seen.append(e.message))
    assert any("gives the kernel of iteration 1 again; trying" in s for s in seen)
    assert len(history.get_run("r1").iterations) == 2


def test_an_llm_engineer_prompt_carries_the_profile_facts() -> None:
    facts = ProfileFacts(iteration=2, verdict="accepted", pct_of_floor=40.0, bound="memory",
                         hot={"name": "_k", "kind": "reduction", "ms": 0.2, "share": 0.9})
    text = engineer_first_message(iteration=3, candidate="kernels/x.py", feedback=None,
                                  previous=None, target_speedup=None, baseline={},
                                  profile=facts.text())
    assert "40.0% of the roofline floor, memory-bound" in text and "Hottest kernel: _k" in text


def test_the_offline_engineer_applies_a_hypothesis(tmp_path: Path) -> None:
    from kopt.harness.case import load_case
    from kopt.phases.accelerator import literal
    from kopt.phases.engineers.base import EngineerRequest, Toolbox
    from kopt.phases.engineers.offline.engineer import OfflineEngineer

    case = load_case("softmax")

    def propose(options: dict) -> tuple[str, Proposal]:
        request = EngineerRequest(case=case, worktree=tmp_path, plan={}, iteration=2,
                                  toolbox=Toolbox(verify=None, profile=None),  # type: ignore[arg-type]
                                  options=options)
        proposal = OfflineEngineer({}).propose(request)
        return (tmp_path / proposal.candidate).read_text(), proposal

    plain, proposal = propose({})
    assert [k["kind"] for k in proposal.kernels] == ["reduction"]
    looped, _ = propose({"kopt_config": {"reduction": {"BLOCK_SIZE": 4096}},
                         "hypothesis": "reductions looped in 4096-wide blocks"})
    name = proposal.kernels[0]["name"]
    assert literal(looped, "KOPT_CONFIG")[name]["BLOCK_SIZE"] == 4096 != \
        literal(plain, "KOPT_CONFIG")[name]["BLOCK_SIZE"]
    split, _ = propose({"policy": "one kernel per op"})
    assert split != plain


def test_a_cpu_run_tests_no_hypothesis(repo: Path) -> None:
    """The interpreter measures no speed: no hypothesis could be judged, none is tested."""
    engineers: list[FakeEngineer] = []
    f = fakes(engineers)
    f["engineer_factory"] = lambda spec, options: engineers.append(
        HypothesisEngineer(options)) or engineers[-1]
    seen: list[str] = []
    run_pipeline("layernorm_gelu", iterations=3, run_id="r1", phases="architect,optimizer",
                 fakes=f, events=lambda e: seen.append(e.message))
    assert all("hypothesis" not in r.options for r in engineers[0].requests)
    assert any("again (already verified); stopping the optimizer early" in s for s in seen)
    assert read_manifest(repo / "manifests/r1/optimizer.json").details["hypotheses"] == []


class RememberingEngineer(FakeEngineer):
    """The first hypothesis ever asked for wins (0.5 ms); every other one gives a different
    kernel as slow as round 1's (0.9 ms)."""

    asked: list[str] = []

    def propose(self, request, events):  # type: ignore[no-untyped-def]
        h = request.options.get("hypothesis")
        if h is not None:
            type(self).asked.append(h)
        out = request.worktree / "kernels" / f"{request.case.name}.py"
        out.parent.mkdir(exist_ok=True)
        ms = 0.9 if h is None or h != type(self).asked[0] else 0.5
        out.write_text(GOOD_KERNEL.format(ms=ms) + (f"# tested: {h}\n" if h else ""))
        return Proposal(candidate=f"kernels/{request.case.name}.py", notes="fake",
                        kernels=[{"name": "_g0_norm_kernel", "kind": "reduction"}])


def test_the_strategy_memory_skips_what_lost_and_tests_again_what_won(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kopt.phases import strategy_memory

    RememberingEngineer.asked = []
    f = gpu_fakes(monkeypatch, engineer=RememberingEngineer)
    run_pipeline("layernorm_gelu", iterations=3, run_id="r1", phases="architect,optimizer",
                 fakes=f)
    won, lost = RememberingEngineer.asked
    [walk] = strategy_memory.entries()
    assert walk["gpu"] == "Fake H100" and walk["default_ms"] == pytest.approx(0.9)
    assert walk["results"] == {won: pytest.approx(0.5), lost: pytest.approx(0.9)}
    seen: list[str] = []
    run_pipeline("layernorm_gelu", iterations=3, run_id="r2", phases="architect,optimizer",
                 fakes=f, events=lambda e: seen.append(e.message))
    opt = read_manifest(repo / "manifests/r2/optimizer.json")
    tested = [h["name"] for h in opt.details["hypotheses"]]
    assert won in tested and lost not in tested and len(tested) == 2  # a new one instead
    assert [s["name"] for s in opt.details["settled_by_memory"]] == [lost]
    assert any(f"strategy memory: not testing {lost!r} again (0.9 ms against the first "
               "candidate's 0.9 ms on Fake H100, run r1" in s for s in seen), seen
    # what r1 measured for the hypothesis r2 skipped is kept beside r2's own figures
    [walk] = strategy_memory.entries()
    assert set(walk["results"]) == {won, lost, *tested} and walk["run_id"] == "r2"


def test_strategy_evidence_from_other_compilers_is_not_used(
        workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from kopt.phases import strategy_memory

    strategy_memory.remember("G", "p", "b", 1.0, {"slower": 1.01, "faster": 0.9, "broken": None},
                             {"case": "c", "run_id": "r"})
    entry = strategy_memory.recall("G", "p", "b")
    assert entry is not None
    # within the timer's noise, or rejected: settled; a real gain: tested again
    assert set(strategy_memory.settled(entry)) == {"slower", "broken"}
    from kopt.workbench.cli import main

    assert main(["memory", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [w["pattern"] for w in listed["strategies"]] == ["p"] and listed["entries"] == []
    monkeypatch.setattr(strategy_memory, "versions", lambda: {"torch": "9.9", "triton": "9.9"})
    assert strategy_memory.recall("G", "p", "b") is None
    assert strategy_memory.clear() == 1 and strategy_memory.entries() == []


class NothingGains(FakeEngineer):
    """Every hypothesis gives a different kernel exactly as fast as round 1's."""

    def propose(self, request, events):  # type: ignore[no-untyped-def]
        h = request.options.get("hypothesis")
        out = request.worktree / "kernels" / f"{request.case.name}.py"
        out.parent.mkdir(exist_ok=True)
        out.write_text(GOOD_KERNEL.format(ms=0.9) + (f"# tested: {h}\n" if h else ""))
        return Proposal(candidate=f"kernels/{request.case.name}.py", notes="fake",
                        kernels=[{"name": "_g0_norm_kernel", "kind": "reduction"}])


def test_the_walk_stops_after_two_hypotheses_that_gain_nothing_memory_included(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kopt.phases.optimizer import PATIENCE

    f = gpu_fakes(monkeypatch, engineer=NothingGains)
    seen: list[str] = []
    run_pipeline("layernorm_gelu", iterations=6, run_id="r1", phases="architect,optimizer",
                 fakes=f, events=lambda e: seen.append(e.message))
    opt = read_manifest(repo / "manifests/r1/optimizer.json")
    assert len(opt.details["hypotheses"]) == PATIENCE == 2  # not 5: the budget was 6 rounds
    assert any("round 4: the last 2 hypotheses gained nothing" in s for s in seen), seen
    # the next run knows both lost from this first candidate: round 1 only
    seen.clear()
    run_pipeline("layernorm_gelu", iterations=6, run_id="r2", phases="architect,optimizer",
                 fakes=f, events=lambda e: seen.append(e.message))
    opt = read_manifest(repo / "manifests/r2/optimizer.json")
    assert opt.details["hypotheses"] == [] and len(opt.details["settled_by_memory"]) == 2
    assert len(history.get_run("r2").iterations) == 1
    assert any("round 2: the last 2 hypotheses gained nothing" in s for s in seen), seen


def test_the_walk_stops_once_the_best_kernel_is_at_the_floor(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 1's kernel at 95% of the roofline floor: no hypothesis is tested (each would cost
    a verification and a timing for at most the 5% left); at 50% the walk goes on."""
    from kopt.phases.optimizer import AT_FLOOR_PCT

    def run(floor_ms: float, run_id: str) -> tuple[list[str], list[str]]:
        f = gpu_fakes(monkeypatch, engineer=HypothesisEngineer)
        inner = f["measure"]

        def measure(case, variant, **kw):  # type: ignore[no-untyped-def]
            m = inner(case, variant, **kw)
            ms = m["latency_ms"]["median"]
            m["roofline"] = {**m["roofline"], "floor_ms": floor_ms,
                             "pct_of_floor": 100.0 * floor_ms / ms, "bound": "memory"}
            return m

        f["measure"] = measure
        seen: list[str] = []
        run_pipeline("layernorm_gelu", iterations=3, run_id=run_id,
                     phases="architect,optimizer", fakes=f, events=lambda e: seen.append(e.message))
        opt = read_manifest(repo / f"manifests/{run_id}/optimizer.json")
        return [h["name"] for h in opt.details["hypotheses"]], seen

    tested, seen = run(0.855, "r1")  # round 1: 0.9 ms, 95% of floor
    assert tested == [] and len(history.get_run("r1").iterations) == 1
    assert any(f"round 2: iteration 1 runs at 95.0% of the roofline floor (at least "
               f"{AT_FLOOR_PCT:.0f}%)" in s for s in seen), seen
    tested, _ = run(0.45, "r2")  # 50%: the hypotheses are tested (0.5 ms is 90%: then it stops)
    assert len(tested) == 1 and len(history.get_run("r2").iterations) == 2

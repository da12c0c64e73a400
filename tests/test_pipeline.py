"""The pipeline with the harness and the engineer faked: manifests, commits per iteration,
report, archive, refusals, feedback and the accelerator's search space."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_pipeline_fakes import GOOD_KERNEL, FakeEngineer, fake_measure, fakes

from kopt.harness.errors import BadInputError, ManifestError
from kopt.phases import history
from kopt.phases.accelerator import apply_config, literal, search_space
from kopt.phases.engineers.base import Proposal
from kopt.phases.manifest import read_manifest, validation_errors
from kopt.phases.pipeline import parse_phases, run_pipeline


@pytest.fixture
def repo(workspace: Path) -> Path:
    history.init_workspace(workspace)
    return workspace


def test_full_run_yields_four_manifests_commits_report_and_archive(repo: Path) -> None:
    engineers: list[FakeEngineer] = []
    result = run_pipeline("layernorm_gelu", iterations=3, run_id="r1", fakes=fakes(engineers))
    assert set(result.to_dict()) == {"run_id", "case", "branch", "manifests", "archive",
                                     "speedup_vs_eager", "speedup_vs_compile", "verified",
                                     "outcome", "timing_label", "timing_breakdown"}
    # the CPU interpreter measures no speed: no figure anywhere the user reads one
    assert result.outcome["verdict"] == "cpu-verified"
    assert result.outcome["summary"] == "verified (CPU interpreter: no speed measured)"
    assert result.speedup_vs_eager is None and result.speedup_vs_compile is None
    assert set(result.timing_breakdown["phases"]) == {"architect", "optimizer", "accelerator",
                                                      "integrator"}
    assert result.verified and result.branch == "kopt/layernorm_gelu/r1"
    assert [Path(m).name for m in result.manifests] == \
        ["architect.json", "optimizer.json", "accelerator.json", "integrator.json"]
    for m in result.manifests:
        assert validation_errors(json.loads((repo / m).read_text())) == []

    opt = read_manifest(repo / "manifests/r1/optimizer.json")
    verdicts = [(i["iteration"], i["verdict"]) for i in opt.details["iterations"]]
    assert verdicts == [(1, "rejected"), (2, "accepted"), (3, "accepted")]
    assert opt.details["best"]["iteration"] == 3 and opt.speedup == pytest.approx(6.0)
    assert opt.details["unfused"] == [{"op": "aten::dropout", "reason": "identity in eval"}]

    # one commit per iteration, each holding the kernel + its verification (+ metrics)
    run = history.get_run("r1")
    assert [i.iteration for i in run.iterations] == [1, 2, 3]
    assert run.iterations[0].message == \
        "optimizer: layernorm_gelu iter 1 - rejected (every_element_written)"
    assert run.iterations[2].message == \
        "optimizer: layernorm_gelu iter 3 - verified (CPU interpreter: no speed measured)"
    tree = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "--name-only",
                           run.iterations[2].commit, "kernels"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert tree == ["kernels/layernorm_gelu.metrics.json", "kernels/layernorm_gelu.py",
                    "kernels/layernorm_gelu.verification.json"]

    # the engineer got the verifier's report of the rejected round as feedback
    eng = engineers[0]
    assert eng.requests[0].feedback is None
    assert "every_element_written: FAIL" in eng.requests[1].feedback
    assert eng.requests[1].previous == Path("kernels/layernorm_gelu.py")

    acc = read_manifest(repo / "manifests/r1/accelerator.json")
    assert acc.details["gpu"] == "no GPU: default configuration verified only"
    assert acc.details["budget"]["trials_run"] == 1

    final = read_manifest(repo / "manifests/r1/integrator.json")
    assert final.details["approval"]["state"] == "pending"
    assert final.details["timing"]["speedup_vs_compile"] == pytest.approx(1.6 / (1 / 3))
    report = (repo / final.details["report"]).read_text()
    assert "cpu-interpreter" in report and "no speed measured" in report and "chart.png" in report
    assert "6.00x" not in report and "0.0" not in report.split("## Final")[0].split("| kopt")[1]
    archive = repo / result.archive
    assert archive.name.endswith("-layernorm_gelu-cpu-verified")
    for name in ("layernorm_gelu.py", "report.md", "REPRODUCE.md", "chart.png",
                 "manifests/integrator.json", "MANIFEST.txt"):
        assert (archive / name).is_file(), name
    assert (archive / "chart.png").read_bytes()[:4] == b"\x89PNG"
    assert "kopt verify layernorm_gelu" in (archive / "REPRODUCE.md").read_text()
    assert not [p for p in (repo / "archive").iterdir() if p.name.startswith(".")]


def test_a_hand_edited_manifest_is_refused_by_the_next_phase(repo: Path) -> None:
    run_pipeline("layernorm_gelu", iterations=2, run_id="r1", phases="architect,optimizer",
                 fakes=fakes())
    best = repo / "manifests/r1/optimizer/best.py"
    best.write_text(best.read_text() + "# tweaked by hand\n")
    with pytest.raises(ManifestError, match=r"optimizer/best.py: sha256"):
        run_pipeline("layernorm_gelu", run_id="r1", phases="accelerator", fakes=fakes())

    best.write_text(best.read_text().replace("# tweaked by hand\n", ""))
    path = repo / "manifests/r1/optimizer.json"
    data = json.loads(path.read_text())
    data["benchmarks"]["speedup"] = 100
    data["status"] = "verifed"
    path.write_text(json.dumps(data))
    with pytest.raises(ManifestError, match=r"optimizer.json: /status"):
        run_pipeline("layernorm_gelu", run_id="r1", phases="accelerator", fakes=fakes())


def test_the_users_rejection_feeds_the_next_runs_first_round(repo: Path) -> None:
    run_pipeline("layernorm_gelu", iterations=2, run_id="r1", fakes=fakes())
    history.reject("r1", reason="uses too much shared memory on A100")
    engineers: list[FakeEngineer] = []
    run_pipeline("layernorm_gelu", iterations=1, run_id="r2", phases="architect,optimizer",
                 fakes=fakes(engineers))
    first = engineers[0].requests[0].feedback
    assert "rejected run r1" in first and "shared memory on A100" in first
    opt = read_manifest(repo / "manifests/r2/optimizer.json")
    assert opt.status == "failed"  # round 1 of the fake is always rejected
    assert opt.details["best"] is None


def test_phases_must_be_a_subset_in_order(repo: Path) -> None:
    assert parse_phases("architect,optimizer") == ["architect", "optimizer"]
    with pytest.raises(BadInputError, match="pipeline order"):
        parse_phases("optimizer,architect")
    with pytest.raises(BadInputError, match="unknown phase"):
        parse_phases("architect,tuner")
    with pytest.raises(BadInputError, match="starts with the architect"):
        run_pipeline("layernorm_gelu", phases="optimizer", fakes=fakes())


def test_archive_redacts_the_api_key(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-ant-api03-" + "x" * 40
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)

    class LeakyEngineer(FakeEngineer):
        def propose(self, request, events):  # type: ignore[no-untyped-def]
            proposal = super().propose(request, events)
            log = request.run_dir / "transcripts" / "optimizer.jsonl"
            log.parent.mkdir(exist_ok=True)
            log.write_text(json.dumps({"headers": {"x-api-key": key}}) + "\n")
            return proposal

    f = fakes()
    f["engineer_factory"] = lambda spec, options: LeakyEngineer(options)
    result = run_pipeline("layernorm_gelu", iterations=2, run_id="r1", fakes=f)
    archive = repo / result.archive
    assert (archive / "transcripts" / "optimizer.jsonl").is_file()
    for p in archive.rglob("*"):
        if p.is_file():
            assert key.encode() not in p.read_bytes(), p
    assert "redacted in transcripts/optimizer.jsonl" in (archive / "MANIFEST.txt").read_text()


SOURCE = '''KOPT_TUNABLES = {"BLOCK_ROWS": [1, 2, 4], "num_warps": [2, 4, 8]}
KOPT_CONFIG = {"BLOCK_ROWS": 2,
               "num_warps": 4}  # measured default
BLOCK_SIZE = 1024  # why: one row per program
'''


def test_accelerator_search_space_and_rewrite() -> None:
    style, space, default = search_space(SOURCE, None)
    assert style == "config" and default == {"BLOCK_ROWS": 2, "num_warps": 4}
    assert space == {"BLOCK_ROWS": [1, 2, 4], "num_warps": [2, 4, 8]}
    out = apply_config(SOURCE, style, {"BLOCK_ROWS": 4, "num_warps": 8})
    assert literal(out, "KOPT_CONFIG") == {"BLOCK_ROWS": 4, "num_warps": 8}
    assert "# measured default" in out and "BLOCK_SIZE = 1024  # why" in out
    # no KOPT_TUNABLES: the engineer's tunable module constants
    style, space, default = search_space(SOURCE.split("\n", 3)[3], {"BLOCK_SIZE": [512, 1024]})
    assert (style, default) == ("constants", {"BLOCK_SIZE": 1024})
    assert "BLOCK_SIZE = 512  # why" in apply_config("BLOCK_SIZE = 1024  # why\n", style,
                                                     {"BLOCK_SIZE": 512})
    nested = ('KOPT_TUNABLES = {"_k": {"BLOCK_SIZE": [1024, 2048]}}\n'
              'KOPT_CONFIG = {"_k": {"BLOCK_SIZE": 2048, "num_warps": 8}}\n')
    style, space, default = search_space(nested, None)
    assert default == {"_k/BLOCK_SIZE": 2048}
    assert literal(apply_config(nested, style, {"_k/BLOCK_SIZE": 1024}), "KOPT_CONFIG") == \
        {"_k": {"BLOCK_SIZE": 1024, "num_warps": 8}}


def test_decisions_are_mirrored_into_the_integrator_manifest(repo: Path) -> None:
    run_pipeline("layernorm_gelu", iterations=2, run_id="r1", fakes=fakes())
    path = repo / "manifests/r1/integrator.json"
    history.reject("r1", "2", reason="numerics drift at fp16")
    approval = read_manifest(path).details["approval"]
    assert approval["state"] == "rejected" and approval["reason"] == "numerics drift at fp16"
    assert approval["commit"] == history.get_run("r1").iterations[1].commit
    history.undo_decision("r1")
    assert read_manifest(path).details["approval"]["state"] == "pending"
    history.approve("r1")
    assert read_manifest(path).details["approval"]["state"] == "approved"


def test_accelerator_on_a_gpu_searches_verifies_commits_and_remembers(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from kopt.phases import accelerator, tuning_memory
    from kopt.phases.run import RunConfig, open_context

    run_pipeline("layernorm_gelu", iterations=2, run_id="r1", phases="architect,optimizer",
                 fakes=fakes())
    monkeypatch.setattr("kopt.phases.run.local_gpu_name", lambda: "Fake H100")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "Fake H100")
    verified: list[str] = []
    tuned: list[list[str]] = []
    f = fakes()

    def verify(case, path, **kw):  # type: ignore[no-untyped-def]
        verified.append(Path(path).name)
        return f["verify"](case, path)

    def tune(case, paths, **kw):  # type: ignore[no-untyped-def]
        tuned.append([Path(p).name for p in paths])
        return [{"ok": True, "checked": True, "detail": "output matches",
                 **{k: f["measure"](case, p)["latency_ms"]["median"]
                    for k in ("median_ms", "p20_ms", "p80_ms")}} for p in paths]

    ctx = open_context(RunConfig.load(repo / "manifests/r1"), root=repo,
                       **{**f, "verify": verify, "tune": tune})
    ctx.device = "cuda"  # the search path; the fakes stand in for the GPU
    lines: list[str] = []
    manifest = accelerator.run(ctx, lambda e: lines.append(e.message))
    d = manifest.details
    assert d["gpu"] == "Fake H100" and d["budget"]["space_size"] == 6
    assert not any("searching" in line and "configuration" in line for line in lines)
    # coordinate search: BLOCK_ROWS walked 1 -> 2 -> 4 (each step gains), num_warps 4 -> 2
    # gains nothing (the fake ignores it): stopped; the joint check re-times default + winner
    steps = [(s["param"], s["from"], s["to"]) for s in d["search"]]
    assert steps[:2] == [("BLOCK_ROWS", 1, 4), ("num_warps", 4, 4)]
    assert "gains under the timer's noise" in d["search"][1]["stopped"] \
        or "no neighbour gains" in d["search"][1]["stopped"] \
        or "no first step gains" in d["search"][1]["stopped"]  # settled by the sweep
    assert any(line.startswith("tuning BLOCK_ROWS: from 1") for line in lines)
    assert tuned[-1] == ["trial-0.py", tuned[-1][1]] and len(tuned[-1]) == 2  # joint check
    # start, the sweep's two first steps, BLOCK_ROWS 4, the second pass's sweep (num_warps 2
    # at BLOCK_ROWS 4), the joint check's two
    assert d["budget"]["trials_run"] == 7
    # only the winner fully verified
    win = [t for t in d["trials"] if t["verdict"] == "accepted"]
    assert len(win) == 1 and win[0]["fully_verified"] and verified == [Path(win[0]["source"]).name]
    assert d["winner"]["config"] == {"BLOCK_ROWS": 4, "num_warps": 4} and d["winner"]["changed"]
    kernel = (repo / d["winner"]["kernel"]).read_text()
    assert literal(kernel, "KOPT_CONFIG") == {"BLOCK_ROWS": 4, "num_warps": 4}
    last = history.get_run("r1").iterations[-1]
    assert (last.phase, last.iteration, last.verified) == ("accelerator", 3, True)
    assert last.commit == d["winner"]["commit"]
    assert history.show_file(last.commit, "kernels/layernorm_gelu.py") == kernel
    assert d["remembered"].endswith("tuning/Fake_H100.json")
    [entry] = tuning_memory.entries()
    assert entry["config"] == {"BLOCK_ROWS": 4, "num_warps": 4} and entry["gpu"] == "Fake H100"
    assert entry["commit"] == d["winner"]["commit"] and entry["median_ms"] and entry["date"]
    # the neighbours timed from the winning values that gained nothing, for the next run
    assert set(entry["settled"]) == {"BLOCK_ROWS", "num_warps"}
    assert 4 not in entry["settled"]["BLOCK_ROWS"] and entry["settled"]["num_warps"]

    # the next run of a matching kernel starts from the memory, re-timed against the default
    lines.clear()
    tuned.clear()
    d2 = accelerator.run(ctx, lambda e: lines.append(e.message)).details
    assert any(line.startswith("tuning memory: the kernel starts from") for line in lines)
    assert len(tuned[0]) == 2  # default and remembered, side by side
    assert d2["memory"]["kernel"]["config"] == {"BLOCK_ROWS": 4, "num_warps": 4}
    assert d2["winner"]["config"] == {"BLOCK_ROWS": 4, "num_warps": 4}
    # no neighbour the memory settled is timed again: the start's job is the only one
    assert len(tuned) == 1 and d2["budget"]["trials_run"] == 2
    assert all("the tuning memory" in step["stopped"] for step in d2["search"])
    assert any("the tuning memory says" in line for line in lines)
    # a kernel whose default is the remembered winner, every neighbour settled: nothing to
    # compare, so no tune job; the optimizer's timing of those bytes stands
    memory_file = Path(d["remembered"])
    data = json.loads(memory_file.read_text())
    [key] = data
    default = {"BLOCK_ROWS": 1, "num_warps": 4}
    space = d["tunables"]
    data[key]["config"] = default
    data[key]["settled"] = {k: [v for v in space[k] if v != default[k]] for k in default}
    memory_file.write_text(json.dumps(data))
    tuned.clear()
    lines.clear()
    d3 = accelerator.run(ctx, lambda e: lines.append(e.message)).details
    assert tuned == [] and d3["winner"]["config"] == default and not d3["winner"]["changed"]
    assert any("nothing left to try from the start: its known timing stands" in line
               for line in lines)
    opt_best = json.loads((repo / "manifests/r1/optimizer.json").read_text())["details"]["best"]
    assert d3["winner"]["median_ms"] == opt_best["median_ms"]
    # and the memory still holds what settled it: the next run needs no tune job either
    assert json.loads(memory_file.read_text())[key]["settled"] == data[key]["settled"]
    accelerator.run(ctx, lambda e: None)
    assert tuned == []
    # evidence from other compilers' versions is a starting point only: the search runs
    monkeypatch.setattr(accelerator, "versions", lambda: {"torch": "0.0", "triton": "0.0"})
    tuned.clear()
    accelerator.run(ctx, lambda e: None)
    assert len(tuned) > 1


def test_accelerator_falls_back_to_the_next_fastest_when_the_winner_is_rejected(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from kopt.phases import accelerator
    from kopt.phases.run import RunConfig, open_context

    run_pipeline("layernorm_gelu", iterations=2, run_id="r1", phases="architect,optimizer",
                 fakes=fakes())
    monkeypatch.setattr("kopt.phases.run.local_gpu_name", lambda: "Fake H100")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "Fake H100")
    f = fakes()
    verified: list[dict[str, int]] = []

    def verify(case, path, **kw):  # type: ignore[no-untyped-def]
        config = literal(Path(path).read_text(), "KOPT_CONFIG")
        verified.append(config)
        report = f["verify"](case, path)
        report.accepted = config["BLOCK_ROWS"] != 4  # the fastest fails a full check
        return report

    def tune(case, paths, **kw):  # type: ignore[no-untyped-def]
        out = []
        for p in paths:
            ms = f["measure"](case, p)["latency_ms"]["median"]
            wrong = literal(Path(p).read_text(), "KOPT_CONFIG")["num_warps"] == 4
            out.append({"ok": True, "checked": not wrong, "median_ms": ms, "p20_ms": ms,
                        "p80_ms": ms, "detail": "wrong output" if wrong else "output matches"})
        return out

    ctx = open_context(RunConfig.load(repo / "manifests/r1"), root=repo,
                       **{**f, "verify": verify, "tune": tune})
    ctx.device = "cuda"
    d = accelerator.run(ctx, lambda e: None).details
    # num_warps=4 trials fail the cheap output check; BLOCK_ROWS=4 fails full verification
    assert verified == [{"BLOCK_ROWS": 4, "num_warps": 2}, {"BLOCK_ROWS": 2, "num_warps": 2}]
    assert d["winner"]["config"] == {"BLOCK_ROWS": 2, "num_warps": 2}
    verdicts = {json.dumps(t["config"], sort_keys=True): t["verdict"] for t in d["trials"]}
    assert verdicts[json.dumps({"BLOCK_ROWS": 4, "num_warps": 2}, sort_keys=True)] == "rejected"
    # the sweep's (2, 4) failed the cheap check: recorded as such
    assert verdicts[json.dumps({"BLOCK_ROWS": 2, "num_warps": 4}, sort_keys=True)] == "rejected"
    assert verdicts[json.dumps({"BLOCK_ROWS": 1, "num_warps": 2}, sort_keys=True)] == "checked"
    assert d["budget"]["fully_verified"] and len(d["budget"]["fully_verified"]) == 2


def test_a_cancelled_round_is_kept_as_a_commit_marked_cancelled(repo: Path) -> None:
    from kopt.phases.run import RunCancelled

    class CancellingEngineer(FakeEngineer):
        def propose(self, request, events):  # type: ignore[no-untyped-def]
            if request.iteration < 2:
                return super().propose(request, events)
            out = request.worktree / "kernels" / f"{request.case.name}.py"
            out.write_text("# partial: the user pressed Esc here\nclass ModelNew:\n    pass\n")
            return Proposal(candidate=f"kernels/{request.case.name}.py", notes="half written",
                            cancelled=True)

    f = fakes()
    f["engineer_factory"] = lambda spec, options: CancellingEngineer(options)
    with pytest.raises(RunCancelled):
        run_pipeline("layernorm_gelu", iterations=3, run_id="r1", fakes=f)
    its = history.get_run("r1").iterations
    assert [i.iteration for i in its] == [1, 2] and not its[-1].verified
    message = subprocess.run(["git", "log", "-1", "--format=%B", its[-1].commit], cwd=repo,
                             capture_output=True, text=True, check=True).stdout
    assert "Kopt-Cancelled: yes" in message and "cancelled" in message.splitlines()[0]
    assert "partial" in history.show_file(its[-1].commit, "kernels/layernorm_gelu.py")
    log = (repo / "manifests/r1/optimizer/iterations.jsonl").read_text().splitlines()
    assert json.loads(log[-1])["verdict"] == "cancelled"


def test_optimizer_stops_early_when_the_engineer_repeats_an_accepted_kernel(repo: Path) -> None:
    """A deterministic engineer with nothing new to try (the offline one, once accepted) must
    not spend the remaining rounds re-verifying and re-committing the same bytes."""

    class RepeatingEngineer(FakeEngineer):
        def propose(self, request, events):  # type: ignore[no-untyped-def]
            out = request.worktree / "kernels" / f"{request.case.name}.py"
            out.parent.mkdir(exist_ok=True)
            out.write_text(GOOD_KERNEL.format(ms=0.5))
            return Proposal(candidate=f"kernels/{request.case.name}.py", notes="same again")

    f = fakes()
    f["engineer_factory"] = lambda spec, options: RepeatingEngineer(options)
    run_pipeline("layernorm_gelu", iterations=3, run_id="r1", phases="architect,optimizer", fakes=f)
    its = history.get_run("r1").iterations
    assert [(i.iteration, i.verified) for i in its] == [(1, True)]
    rounds = (repo / "manifests/r1/optimizer/rounds.jsonl").read_text().splitlines()
    assert len(rounds) == 2 and "stopped early" in json.loads(rounds[-1])["notes"]


def test_an_untimed_final_kernel_fails_the_integrator_and_says_why(repo: Path) -> None:
    def measure(case: Any, variant: Any, **kw: Any) -> dict[str, Any]:
        if kw.get("label") == "final-kernel":
            return {"ok": False, "error": "refused: events saw 0.0013 ms but fn + device-wide "
                                          "synchronize took 0.2304 ms"}
        return fake_measure(case, variant, **kw)

    seen: list[str] = []
    result = run_pipeline("layernorm_gelu", iterations=2, run_id="r1",
                          fakes={**fakes(), "measure": measure},
                          events=lambda e: seen.append(f"{e.phase}: {e.message}"))
    final = read_manifest(repo / "manifests/r1/integrator.json")
    assert final.status == "failed" and not result.verified
    assert final.details["timing"]["candidate_error"].startswith("refused: events saw 0.0013 ms")
    assert final.details["timing"]["eager_error"] is None
    assert any(s.startswith("integrator: failed: the kernel was not timed: refused") for s in seen)
    assert "the kernel was not timed: refused" in (repo / final.details["report"]).read_text()

"""`kopt bench` / `bench_case` on the CPU interpreter: honest rows timed, cheats refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kopt.harness.bench import ROW_KEYS, bench_case
from kopt.workbench.cli import main

CORPUS = Path(__file__).parent / "corpus"
CASE = CORPUS / "cases" / "ln_gelu_small"


@pytest.fixture(scope="module")
def unverified_rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    mp = pytest.MonkeyPatch()
    home = tmp_path_factory.mktemp("bench-home")
    mp.setenv("KOPT_HOME", str(home))
    mp.setenv("KOPT_CACHE", str(home / "cache"))
    try:
        rows = bench_case(CASE, [CORPUS / "honest" / "layernorm_gelu.py",
                                 CORPUS / "cheats" / "patches_clock.py",
                                 CORPUS / "cheats" / "cached_output.py",
                                 CORPUS / "cheats" / "background_thread.py"],
                          device="cpu", unverified=True, baselines=("eager",),
                          timing_options={"max_iters": 5, "max_seconds": 1.0})
    finally:
        mp.undo()
    return {r["variant"]: r for r in rows}


def test_rows_have_the_documented_keys(unverified_rows: dict[str, dict[str, Any]]) -> None:
    assert list(unverified_rows) == ["eager", "layernorm_gelu", "patches_clock", "cached_output",
                                     "background_thread"]
    for row in unverified_rows.values():
        assert set(ROW_KEYS) <= set(row)
        assert row["timing_label"] == "cpu-interpreter"


def test_honest_candidate_is_timed_against_eager(unverified_rows: dict[str, dict[str, Any]]) -> None:
    row = unverified_rows["layernorm_gelu"]
    assert row["median_ms"] and row["p20_ms"] <= row["median_ms"] <= row["p80_ms"]
    assert row["speedup_vs_eager"] == pytest.approx(
        unverified_rows["eager"]["median_ms"] / row["median_ms"])
    assert row["gbps"] and row["gbps"] > 0


@pytest.mark.parametrize("name, reason", [
    ("patches_clock", "clock replaced: time.perf_counter"),
    ("cached_output", "output sample after timing is wrong"),
    ("background_thread", "running"),
])
def test_cheats_are_refused(unverified_rows: dict[str, dict[str, Any]], name: str, reason: str) -> None:
    row = unverified_rows[name]
    assert row["median_ms"] is None and row["verified"] is False
    assert row["note"].startswith("refused:") and reason in row["note"]


def test_rejected_candidate_is_not_timed(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", str(CORPUS / "cases" / "softmax_small"),
                 str(CORPUS / "cheats" / "near_zero_output.py"), "--no-compile", "--json"])
    assert code == 1
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = {r["variant"]: r for r in out["rows"]}
    assert rows["eager"]["median_ms"] > 0
    assert rows["near_zero_output"]["median_ms"] is None
    assert "rejected by verification (correct" in rows["near_zero_output"]["note"]


def test_missing_candidate_is_bad_input(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", str(CASE), "no_such_kernel.py"]) == 2
    assert "no_such_kernel.py" in capsys.readouterr().err


def test_history_dispatches_to_autobench(workspace: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    import kopt.phases.autobench as autobench

    seen: dict[str, Any] = {}

    def fake_history(case: Any, **kwargs: Any) -> list[dict[str, Any]]:
        seen["case"] = case.name
        return [{"run_id": "r1", "commit": "abc", "iteration": 2, "recorded_speedup": 2.0,
                 "median_ms": 1.0, "speedup": 1.5, "regression": True, "note": "slower"}]

    monkeypatch.setattr(autobench, "run_history", fake_history)
    code = main(["bench", str(CASE), "--history", "--json"])
    assert seen["case"] == "ln_gelu_small"
    assert code == 1  # a regression is a negative verdict
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["history"][0]["run_id"] == "r1"


def _sample_row(out: Any, ref: Any, roof: dict[str, Any] | None = None) -> dict[str, Any]:
    import torch  # noqa: F401

    from kopt.harness.bench import _timed_row
    from kopt.harness.case import load_case

    resp = {"variants": {"candidate": {"ok": True, "launches_timed": 3, "timing": {
        "median_ms": 1.0, "p20_ms": 0.9, "p80_ms": 1.1}}}}
    return _timed_row("cand", "cuda-events", True, resp, "candidate", roof or {},
                      ([out], [ref]), load_case(CASE))


def test_only_the_bytes_bound_a_candidate_from_below() -> None:
    """A rewrite may do fewer FLOPs than the model (a product's column sum from summed
    weights): a time under the FLOP floor is timed, one under the time to move the case's
    bytes at the measured copy bandwidth is refused as impossible."""
    import torch

    ref = torch.randn(64, 1)
    flop_bound = {"bytes": 1e9, "flops": 1e15, "floor_ms": 20.0,
                  "ceilings": {"copy_gbps": 2000.0}}  # moving the bytes: 0.5 ms
    row = _sample_row(ref.clone(), ref, flop_bound)
    assert row["median_ms"] == 1.0, row["note"]
    assert row["pct_of_floor"] == 2000.0  # against the model's own floor
    too_fast = {**flop_bound, "bytes": 4e9}  # moving them takes 2 ms: 1 ms is impossible
    row = _sample_row(ref.clone(), ref, too_fast)
    assert row["median_ms"] is None and "impossible" in row["note"] and "4000.0 MB" in row["note"]


def test_sample_check_allows_a_sum_reassociated_at_near_zero_elements() -> None:
    """A long row sum in another order misses the element-wise bound where it cancels to near
    zero (KernelBench level-2 14 on the H100: 2 of 1024 elements, rel err 3e-7): timed."""
    import torch

    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(1024, 1, generator=gen) * 50
    ref[3, 0], ref[700, 0] = 1e-5, -2e-5  # two sums that cancel
    out = ref.clone()
    out[3, 0], out[700, 0] = 1.7e-3, 1.6e-3  # the rounding of 8192 terms at those two
    row = _sample_row(out, ref)
    assert row["median_ms"] == 1.0, row["note"]


def test_sample_check_allows_rounding_that_only_the_whole_tensor_bound_sees() -> None:
    """Every element within its bound, only the whole-tensor relative error over it: an output
    that cancels to near zero (a mean of group-normalised values: 128 elements of ~1e-8, each
    3e-8 off) and an ill-conditioned one (a group norm of sigmoids that differ in their fifth
    digit: O(1) values, 2.5e-5 relative). Both timed, as the verifier accepts them (KernelBench-
    style level-2 21, 23, 41 on an H200: refused after timing, 2026-12-02)."""
    import torch

    gen = torch.Generator().manual_seed(2)
    ref = torch.randn(128, 1, generator=gen) * 1e-8
    row = _sample_row(ref + torch.randn(128, 1, generator=gen) * 3e-8, ref)
    assert row["median_ms"] == 1.0, row["note"]
    ref = torch.randn(4096, 1, generator=gen)
    row = _sample_row(ref + torch.randn(4096, 1, generator=gen) * 2.5e-5, ref)
    assert row["median_ms"] == 1.0, row["note"]


def test_sample_check_allows_bfloat16_steps_a_model_rounds_through() -> None:
    """LLaMA's RMSNorm as written rounds through bfloat16 inside a float32 output: two honest
    orders flip a few elements by one bfloat16 step, past both bounds (128 of 33.5 M on an
    H200, refused after timing although verified, 2026-12-03). Taken; a few elements off by
    more than two steps are not."""
    import torch

    gen = torch.Generator().manual_seed(3)
    ref = torch.randn(64, 256, generator=gen).to(torch.bfloat16).float()
    flipped = ref.clone()
    flipped[3, :40] += flipped[3, :40].abs() * 2.0 ** -7  # one step up, 40 of 16384
    row = _sample_row(flipped, ref)
    assert row["median_ms"] == 1.0, row["note"]
    wrong = ref.clone()
    wrong[3, :40] *= 1.1
    row = _sample_row(wrong, ref)
    assert row["median_ms"] is None and "output sample after timing is wrong" in row["note"]


def test_sample_check_refuses_a_stale_output() -> None:
    import torch

    gen = torch.Generator().manual_seed(1)
    ref, stale = torch.randn(1024, 1, generator=gen), torch.randn(1024, 1, generator=gen)
    row = _sample_row(stale, ref)
    assert row["median_ms"] is None and "output sample after timing is wrong" in row["note"]
    nan = ref.clone()
    nan[5, 0] = float("nan")
    assert _sample_row(nan, ref)["median_ms"] is None


def test_a_candidate_the_caller_just_verified_is_timed_without_a_second_verification(
        workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A saved edit in the workbench is verified, then benched: the bench takes the caller's
    verdict for those very files instead of running the verifier again; any other candidate
    is still verified."""
    import kopt.harness.bench as bench

    verified_here: list[list[str]] = []
    real = bench.verify_candidates

    def spy(case, paths, **kw):  # type: ignore[no-untyped-def]
        verified_here.append([Path(p).name for p in paths])
        return real(case, paths, **kw)

    monkeypatch.setattr(bench, "verify_candidates", spy)
    honest = CORPUS / "honest" / "layernorm_gelu.py"
    rows = bench_case(CASE, [honest], device="cpu", verified=[honest], baselines=("eager",),
                      timing_options={"max_iters": 5, "max_seconds": 1.0})
    assert verified_here == []
    row = next(r for r in rows if r["variant"] == "layernorm_gelu")
    assert row["verified"] is True and row["median_ms"] is not None
    wrong = CORPUS / "cheats" / "cached_output.py"
    rows = bench_case(CASE, [honest, wrong], device="cpu", verified=[honest],
                      baselines=("eager",), timing_options={"max_iters": 5, "max_seconds": 1.0})
    assert verified_here == [["cached_output.py"]]  # only the one the caller did not verify
    assert next(r for r in rows if r["variant"] == "cached_output")["verified"] is False


@pytest.fixture
def staged(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The variants of every bench job staged from here on, in order."""
    import kopt.harness.bench as bench

    seen: list[list[str]] = []
    real = bench.stage_job

    def spy(kind, request, **kw):  # type: ignore[no-untyped-def]
        seen.append(list(request["variants"]))
        return real(kind, request, **kw)

    monkeypatch.setattr(bench, "stage_job", spy)
    return seen


def test_a_baseline_memo_times_eager_once_and_checks_later_candidates_against_it(
        workspace: Path, tmp_path: Path, staged: list[list[str]]) -> None:
    """The workbench's saved-edit loop: the second bench of the case reuses eager's row (its
    age shown) and times only the candidate, whose output sample is still compared with the
    kept baseline's (a cached output is refused); a changed case file, or an age past the
    memo's limit, times eager again."""
    import shutil

    import kopt.harness.bench as bench

    case = tmp_path / "ln_gelu_small"
    shutil.copytree(CASE, case)
    honest = CORPUS / "honest" / "layernorm_gelu.py"
    cached = CORPUS / "cheats" / "cached_output.py"
    memo = bench.BaselineMemo()
    opts: dict[str, Any] = {"device": "cpu", "baselines": ("eager",), "memo": memo,
                            "timing_options": {"max_iters": 5, "max_seconds": 1.0}}
    first = bench_case(case, [honest], verified=[honest], **opts)
    assert staged == [["eager"], ["candidate"]] and "timed_s_ago" not in first[0]
    second = bench_case(case, [honest, cached], verified=[honest, cached], **opts)
    assert staged[2:] == [["candidate"], ["candidate"]]  # eager kept
    assert second[0]["timed_s_ago"] >= 0 and second[0]["median_ms"] == first[0]["median_ms"]
    assert second[1]["verified"] is True and second[1]["speedup_vs_eager"] is not None
    assert second[2]["verified"] is False and "output sample after timing is wrong" in second[2]["note"]

    (case / "model.py").write_text((case / "model.py").read_text() + "\n# edited\n")
    bench_case(case, [honest], verified=[honest], **opts)
    assert staged[4:] == [["eager"], ["candidate"]]  # the case changed: eager timed again
    memo.keep_s = 0.0
    bench_case(case, [honest], verified=[honest], **opts)
    assert staged[6:] == [["eager"], ["candidate"]]  # too old: timed again


def test_a_workspace_baseline_is_kept_on_disk_for_the_next_command(
        workspace: Path, staged: list[list[str]]) -> None:
    """`kopt run`'s integrator keeps eager's rows in `.kopt/baselines/`: a second command (a new
    memo over the same folder) times only the candidate and still refuses a cached output
    against the kept outputs; an unreadable or too old folder, or `kopt memory --clear`, times
    eager again."""
    import json

    import kopt.harness.bench as bench
    from kopt.harness.paths import baselines_dir
    from kopt.workbench.cli import main

    honest = CORPUS / "honest" / "layernorm_gelu.py"
    cached = CORPUS / "cheats" / "cached_output.py"
    opts: dict[str, Any] = {"device": "cpu", "baselines": ("eager",),
                            "timing_options": {"max_iters": 5, "max_seconds": 1.0}}
    first = bench_case(CASE, [honest], verified=[honest], memo=bench.workspace_baselines(), **opts)
    assert staged == [["eager"], ["candidate"]]
    [kept] = [p for p in baselines_dir().iterdir() if p.is_dir()]
    assert {p.name for p in kept.iterdir()} == {"baseline.json", "check.safetensors",
                                                "reference.safetensors"}
    second = bench_case(CASE, [honest, cached], verified=[honest, cached],
                        memo=bench.workspace_baselines(), **opts)
    assert staged[2:] == [["candidate"], ["candidate"]]  # eager read from disk
    assert second[0]["median_ms"] == first[0]["median_ms"] and second[0]["timed_s_ago"] >= 0
    assert second[1]["verified"] is True and second[1]["speedup_vs_eager"] is not None
    assert "output sample after timing is wrong" in second[2]["note"]

    data = json.loads((kept / "baseline.json").read_text())
    (kept / "baseline.json").write_text(json.dumps({**data, "timed_at": data["timed_at"] - 601}))
    bench_case(CASE, [honest], verified=[honest], memo=bench.workspace_baselines(), **opts)
    assert staged[4:] == [["eager"], ["candidate"]]  # ten minutes old: timed again
    (kept / "check.safetensors").write_bytes(b"torn")
    bench_case(CASE, [honest], verified=[honest], memo=bench.workspace_baselines(), **opts)
    assert staged[6:] == [["eager"], ["candidate"]]  # unreadable: timed again
    assert main(["memory", "--clear"]) == 0 and not baselines_dir().exists()

"""Every cheating candidate in tests/corpus/cheats is rejected with the check named for its
class failing; every honest one in tests/corpus/honest is accepted.

All candidates of a case are verified in one `verify_candidates` call (one reference run,
two workers at a time), once per session, on the CPU Triton interpreter; on a GPU machine
`KOPT_CORPUS_DEVICE=cuda python -m pytest tests/test_verify_corpus.py` runs the same corpus
with real kernels (BENCHMARKS.md records it on the H100).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kopt.harness.verify import CHECK_NAMES, VerificationReport, verify_candidates

# The module's fixture verifies ~45 candidates on the CPU interpreter (each with its extra
# input sets and conditions): more than the suite's 600 s default on a shared 2-core machine.
pytestmark = pytest.mark.timeout(2400)

CORPUS = Path(__file__).parent / "corpus"
DEVICE = os.environ.get("KOPT_CORPUS_DEVICE", "cpu")
CASES = CORPUS / "cases"

# cheat file -> (case, the check that must fail)
CHEATS: dict[str, tuple[str, str]] = {
    "cached_output.py": ("ln_gelu_small", "depends_on_inputs"),
    "unwritten_output.py": ("ln_gelu_small", "every_element_written"),
    "zeroes_inputs.py": ("ln_gelu_small", "no_mutation"),
    "patches_torch.py": ("ln_gelu_small", "no_tampering"),
    "side_stream.py": ("ln_gelu_small", "no_tampering"),
    "background_thread.py": ("ln_gelu_small", "no_tampering"),
    "patches_clock.py": ("ln_gelu_small", "no_tampering"),
    "swaps_function_code.py": ("ln_gelu_small", "no_tampering"),
    "spawns_process.py": ("ln_gelu_small", "no_tampering"),
    "lowers_precision.py": ("ln_gelu_small", "no_tampering"),
    "pytorch_fallback_with_decoy_kernel.py": ("ln_gelu_small", "no_pytorch_fallback"),
    "shape_specialised.py": ("ln_gelu_small", "correct"),
    "seed_specialised.py": ("ln_gelu_small", "correct"),
    "prints_fake_verdict.py": ("ln_gelu_small", "correct"),
    "returns_stale_reference.py": ("ln_gelu_small", "correct"),
    "aliases_input.py": ("ln_gelu_small", "no_aliasing"),
    "mutates_weights.py": ("ln_gelu_small", "no_mutation"),
    "hangs.py": ("ln_gelu_small", "contained"),
    "segfaults.py": ("ln_gelu_small", "contained"),
    "raises.py": ("ln_gelu_small", "contained"),
    "no_triton_kernel.py": ("ln_gelu_small", "triton_launched"),
    "wrong_state_dict.py": ("ln_gelu_small", "loads"),
    "near_zero_output.py": ("softmax_small", "correct"),
    "edits_case.py": ("ln_gelu_small", "isolated_reference"),
    # issue 23's classes (docstring of each file names its class)
    "c01_hides_fallback_from_recorder.py": ("softmax_small", "no_pytorch_fallback"),
    "c01_numpy_does_the_compute.py": ("softmax_small", "static_clean"),
    "c02_forges_launch_counter.py": ("softmax_small", "triton_launched"),
    "c03_fallback_with_other_ops.py": ("softmax_small", "no_pytorch_fallback"),
    "c04_patches_json.py": ("softmax_small", "no_tampering"),
    "c05_stdout_flush_overwrites_outputs.py": ("softmax_small", "correct"),
    "c06_reads_staged_inputs.py": ("softmax_small", "correct"),
    "c07_plants_pth_for_the_reference.py": ("softmax_small", "correct"),
    "c08_driver_stream_replaced.py": ("softmax_small", "no_tampering"),
    "c09_empty_grid_launch.py": ("softmax_small", "triton_launched"),
    "c09_reference_from_the_stack.py": ("softmax_small", "static_clean"),
    "c10_writes_its_own_record.py": ("softmax_small", "loads"),
    "c16_lazy_tensor_subclass.py": ("softmax_small", "correct"),
    "c17_same_output_every_call.py": ("softmax_small", "no_aliasing"),
    "c18_fallback_replayed_from_a_graph.py": ("softmax_small", "no_pytorch_fallback"),
    # issue 21: weights that do not follow the state_dict
    "weights_snapshot_first_call.py": ("rmsnorm_small", "depends_on_weights"),
    "weights_from_case_seed.py": ("rmsnorm_small", "depends_on_weights"),
    "weights_baked_constants.py": ("rmsnorm_small", "depends_on_weights"),
    # issue 23 class 11: conditions a candidate could detect
    "detects_timing_frame.py": ("softmax_small", "correct"),
    "detects_dispatch_mode.py": ("softmax_small", "correct"),
    "counts_calls.py": ("softmax_small", "correct"),
    "detects_grad_mode.py": ("softmax_small", "correct"),
    "detects_compile.py": ("softmax_small", "correct"),
    "declared_row_counts.py": ("softmax_small", "general_inputs"),
    # classes 12-15: inputs the verifier never tried
    "block_capped_width.py": ("softmax_wide_small", "general_inputs"),
    "naive_softmax_overflow.py": ("softmax_small", "hard_values"),
    "assumes_contiguous.py": ("softmax_small", "general_inputs"),
    "partial_update_cache.py": ("softmax_small", "depends_on_inputs"),
}
# what the failing check's detail must name (the condition or input set that caught it)
DETAIL: dict[str, str] = {
    "weights_snapshot_first_call.py": "load_state_dict",
    "detects_grad_mode.py": "grad enabled",
    "detects_dispatch_mode.py": "no dispatch mode",
    "detects_compile.py": "torch.compile",
    "declared_row_counts.py": "x-lead",
    # x-rows (the main set's widest rows) is drawn on the CPU only; on a GPU the main set
    # itself runs, and the first draw wider than the capped block (x-lead) names it
    "block_capped_width.py": "x-rows" if DEVICE == "cpu" else "x-lead",
    "assumes_contiguous.py": "non-contiguous",
    "naive_softmax_overflow.py": "x-hard",
    "partial_update_cache.py": "partial in-place update",
}
# Verified alone, on its own copy of the case: it rewrites the workspace's cases/*/model.py;
# the .pth planter writes into the user's site-packages (HOME points at a temporary folder).
ALONE = {"edits_case.py", "c07_plants_pth_for_the_reference.py"}

HONEST: dict[str, str] = {
    "layernorm_gelu.py": "ln_gelu_small",
    "layernorm_gelu_two_kernels.py": "ln_gelu_small",
    "softmax.py": "softmax_small",
    "rmsnorm.py": "rmsnorm_small",
    "rmsnorm_partial_fusion.py": "rmsnorm_small",
    "softmax_autotuned.py": "softmax_small",
    "softmax_compiled_launcher.py": "softmax_small",
    "rmsnorm_weight_cache_on_load.py": "rmsnorm_small",
    "layernorm_gelu_weight_cache_versioned.py": "ln_gelu_small",
}
HANG_TIMEOUT_S = 15.0
PARALLEL = 2 if DEVICE == "cpu" else 4


@pytest.fixture(scope="module")
def corpus_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, VerificationReport]:
    home = tmp_path_factory.mktemp("corpus-home")
    old = {k: os.environ.get(k) for k in ("KOPT_HOME", "KOPT_CACHE", "HOME", "KOPT_TEST_POISON",
                                          "KOPT_SANDBOX")}
    os.environ["KOPT_HOME"] = str(home)
    os.environ["KOPT_CACHE"] = str(home / "cache")
    try:
        by_case: dict[str, list[Path]] = {}
        for name, (case, _check) in CHEATS.items():
            if name not in ALONE:
                by_case.setdefault(case, []).append(CORPUS / "cheats" / name)
        for name, case in HONEST.items():
            by_case.setdefault(case, []).append(CORPUS / "honest" / name)
        reports: dict[str, VerificationReport] = {}
        timeouts = {str(CORPUS / "cheats" / "hangs.py"): HANG_TIMEOUT_S}
        for case, files in by_case.items():
            for path, report in zip(files, verify_candidates(
                    CASES / case, files, device=DEVICE, max_parallel=PARALLEL, timeouts=timeouts),
                    strict=True):
                reports[path.name] = report
        # c07's .pth acts only with KOPT_TEST_POISON set, and lands under this HOME.
        os.environ["HOME"] = str(home)
        os.environ["KOPT_TEST_POISON"] = "1"
        # with the sandbox on the edit never reaches the workspace (test_sandbox.py); off, the
        # verifier's own evidence (isolated_reference) must still catch it
        os.environ["KOPT_SANDBOX"] = "0"
        for name in ALONE:
            shutil.copytree(CASES / CHEATS[name][0], home / "cases" / CHEATS[name][0],
                            dirs_exist_ok=True)
            reports[name] = verify_candidates(home / "cases" / CHEATS[name][0],
                                              [CORPUS / "cheats" / name], device=DEVICE)[0]
        return reports
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_corpus_has_every_class() -> None:
    cheats = {p.name for p in (CORPUS / "cheats").glob("*.py")}
    honest = {p.name for p in (CORPUS / "honest").glob("*.py")}
    assert cheats == set(CHEATS), "every corpus file is listed with its expected check"
    assert honest == set(HONEST)
    assert len(cheats) >= 15 and len(honest) >= 4


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cheat_is_rejected_by_its_check(name: str, corpus_reports: dict[str, VerificationReport]) -> None:
    report = corpus_reports[name]
    expected = CHEATS[name][1]
    assert not report.accepted
    check = report.check(expected)
    assert not check.passed, f"{name}: {expected} passed: {check.detail}\n{report.to_text()}"
    assert check.detail and not check.detail.startswith(("not checked", "not run")), check.detail
    if name in DETAIL:
        assert DETAIL[name] in check.detail, check.detail


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_candidate_is_accepted(name: str, corpus_reports: dict[str, VerificationReport]) -> None:
    report = corpus_reports[name]
    assert report.accepted, report.to_text()
    assert [c.name for c in report.checks] == list(CHECK_NAMES)
    assert report.input_sets == (["smoke", "shape0"] if DEVICE == "cpu" else ["main", "shape0"])


def test_partial_fusion_reports_the_pytorch_ops_left(corpus_reports: dict[str, VerificationReport]) -> None:
    detail = corpus_reports["rmsnorm_partial_fusion.py"].check("no_pytorch_fallback").detail
    assert "mul" in detail


def test_failure_text_names_the_bad_elements(corpus_reports: dict[str, VerificationReport]) -> None:
    text = corpus_reports["unwritten_output.py"].to_text()
    assert "every_element_written: FAIL" in text
    assert "first bad:" in text and "got nan" in text
    near_zero = corpus_reports["near_zero_output.py"].check("correct").detail
    assert "relative error" in near_zero and "0/" in near_zero  # element-wise alone passed it


def test_hang_is_cut_at_the_timeout(corpus_reports: dict[str, VerificationReport]) -> None:
    assert "timed out" in corpus_reports["hangs.py"].check("contained").detail
    assert "SIGSEGV" in corpus_reports["segfaults.py"].check("contained").detail


def test_a_file_that_never_imports_says_the_one_cause(tmp_path: Path) -> None:
    """issue 17: one cause, the other checks 'not run', the user's own file and line."""
    from kopt.harness.verify import verify_candidate

    bad = tmp_path / "my_kernel.py"
    bad.write_text("import torch\ndef f(:\n    pass\n")
    report = verify_candidate(CASES / "softmax_small", bad, device="cpu")
    assert report.not_a_candidate and str(bad) in report.check("loads").detail
    assert ":2:" in report.check("loads").detail
    assert all(c.status == "not run" for c in report.checks if c.name != "loads")
    assert report.to_dict()["checks"][1]["status"] == "not run"
    assert "candidate.py" not in report.to_text()


def test_weights_are_fresh_and_followed(corpus_reports: dict[str, VerificationReport]) -> None:
    detail = corpus_reports["rmsnorm.py"].check("depends_on_weights").detail
    assert "fresh weights" in detail and "same instance" in detail
    # every extra input set ran (or says why not) on an honest candidate
    general = corpus_reports["softmax.py"].check("general_inputs").detail
    assert "x-lead" in general and "x-strided" in general
    assert ("x-rows" in general) == (DEVICE == "cpu")  # the main set's rows: drawn on the CPU only
    assert "x-hard" in corpus_reports["softmax.py"].check("hard_values").detail
